package kubeapi

// Events on the Node and the outcome annotations, posted in the background
// in the order they happened.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Component is the Events' source component.
const Component = "stratum-upgrade"

// The Node annotations that keep a node's last transaction.
const (
	AnnotationTransaction = "stratum.ciq.com/last-transaction"
	AnnotationOutcome     = "stratum.ciq.com/last-outcome"
	// AnnotationRelease is the Kubernetes version of the node state the
	// node runs after that outcome.
	AnnotationRelease = "stratum.ciq.com/release"
	// AnnotationEventTxn is on each Event: the transaction it is about.
	AnnotationEventTxn = "stratum.ciq.com/transaction"
)

// Notice is one Event to post on the Node.
type Notice struct {
	Time    time.Time
	Txn     string
	Reason  string
	Message string
	Warning bool
}

// Outcome is a transaction's end, for the Node's annotations.
type Outcome struct {
	Txn     string
	Outcome string
	Release string
}

// NodeRef names the node: its Node object is the one of that name, or
// else the one with that address (InternalIP).
type NodeRef struct {
	Name    string
	Address string
}

// ErrNoNode: the API server has no Node object for this node.
var ErrNoNode = errors.New("no Node object for this node")

// Poster posts Notices and Outcomes in the background, in order; Post and
// Annotate never block. While the API server does not answer (a
// transaction replaces it) the next item is retried until Close, which
// gives it one more try; an answer that refuses it drops it with a
// warning.
type Poster struct {
	cs  API
	ref NodeRef
	log *slog.Logger

	mu      sync.Mutex
	queue   []func(context.Context, *corev1.Node) error
	posted  int
	dropped int
	last    error
	node    *corev1.Node
	// off is why nothing more is sent: the Node cannot be found, or the
	// API server refused this client (its certificate, its credentials).
	off error

	wake    chan struct{}
	closing chan struct{}
	abort   chan struct{}
	done    chan struct{}
}

// NewPoster starts a Poster for the node ref names.
func NewPoster(cs API, ref NodeRef, log *slog.Logger) *Poster {
	p := &Poster{cs: cs, ref: ref, log: log, wake: make(chan struct{}, 1),
		closing: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{})}
	go p.work()
	return p
}

// Post queues an Event.
func (p *Poster) Post(n Notice) {
	p.push(func(ctx context.Context, node *corev1.Node) error {
		err := p.cs.CreateEvent(ctx, event(n, node))
		if apierrors.IsAlreadyExists(err) {
			return nil // an earlier try got through before its answer was lost
		}
		return err
	})
}

// Annotate queues the Node's annotations of o.
func (p *Poster) Annotate(o Outcome) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		AnnotationTransaction: o.Txn, AnnotationOutcome: o.Outcome, AnnotationRelease: o.Release,
	}}})
	p.push(func(ctx context.Context, node *corev1.Node) error {
		return p.cs.PatchNode(ctx, node.Name, patch)
	})
}

func (p *Poster) push(f func(context.Context, *corev1.Node) error) {
	p.mu.Lock()
	if p.off != nil {
		p.dropped++
	} else {
		p.queue = append(p.queue, f)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Close waits up to wait for what is queued to be posted, then gives up on
// the rest; it gives up at once when the API server does not answer. The
// error says how many were not posted and why.
func (p *Poster) Close(wait time.Duration) error {
	close(p.closing)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		close(p.abort)
		<-p.done
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	lost := p.dropped + len(p.queue)
	if lost == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d Events or annotations not posted on Node %s: %w", lost, lost+p.posted, p.ref.Name, p.last)
}

// work posts the queue's head until it is posted or refused, retrying
// while the API server does not answer.
func (p *Poster) work() {
	defer close(p.done)
	backoff := 200 * time.Millisecond
	for {
		p.mu.Lock()
		var f func(context.Context, *corev1.Node) error
		if len(p.queue) > 0 {
			f = p.queue[0]
		}
		p.mu.Unlock()
		if f == nil {
			select {
			case <-p.wake:
				continue
			case <-p.closing:
				return
			case <-p.abort:
				return
			}
		}
		err := p.send(f)
		p.mu.Lock()
		switch {
		case err == nil:
			p.queue, p.posted, backoff = p.queue[1:], p.posted+1, 200*time.Millisecond
		case p.off != nil:
			// Told once, by Close: nothing queued or to come is sent.
			p.dropped, p.queue, p.last = p.dropped+len(p.queue), nil, err
		case !transient(err):
			p.queue, p.dropped, p.last = p.queue[1:], p.dropped+1, err
			p.log.Warn("the API server refused an Event or annotation of this node; the transaction is unaffected", "err", err)
		default:
			p.last = err
		}
		retry := err != nil && p.off == nil && transient(err)
		p.mu.Unlock()
		if !retry {
			continue
		}
		select {
		case <-p.closing:
			// The transaction is over and the API server does not answer
			// now: what is left is not worth the command's time.
			p.mu.Lock()
			p.dropped, p.queue = p.dropped+len(p.queue), nil
			p.mu.Unlock()
			return
		default:
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 3*time.Second)
		case <-p.closing: // one more try, at once
		case <-p.abort:
			return
		}
	}
}

// send runs f on the Node, found first.
func (p *Poster) send(f func(context.Context, *corev1.Node) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	if p.node == nil {
		node, err := FindNode(ctx, p.cs, p.ref)
		if err != nil {
			if !transient(err) {
				p.mu.Lock()
				p.off = err
				p.mu.Unlock()
			}
			return err
		}
		p.node = node
	}
	return f(ctx, p.node)
}

// FindNode is ref's Node: the one named ref.Name, or else the only one with
// the InternalIP ref.Address (a node whose name is not its etcd member's).
func FindNode(ctx context.Context, cs API, ref NodeRef) (*corev1.Node, error) {
	node, err := cs.GetNode(ctx, ref.Name)
	if err == nil {
		return node, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the Node object %s: %w", ref.Name, err)
	}
	list, err := cs.ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("the Node objects: %w", err)
	}
	var found []*corev1.Node
	for i := range list.Items {
		for _, a := range list.Items[i].Status.Addresses {
			if a.Type == corev1.NodeInternalIP && a.Address == ref.Address {
				found = append(found, &list.Items[i])
				break
			}
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%w: none named %s, %d with InternalIP %s", ErrNoNode, ref.Name, len(found), ref.Address)
	}
	return found[0], nil
}

// event is n as an Event on node, named as client-go's recorder names one
// (so that a retry of a create that got through is AlreadyExists).
func event(n Notice, node *corev1.Node) *corev1.Event {
	typ := corev1.EventTypeNormal
	if n.Warning {
		typ = corev1.EventTypeWarning
	}
	t := metav1.NewTime(n.Time)
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        node.Name + "." + strconv.FormatInt(n.Time.UnixNano(), 16),
			Namespace:   metav1.NamespaceDefault,
			Annotations: map[string]string{AnnotationEventTxn: n.Txn},
		},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		Reason:         n.Reason,
		Message:        "transaction " + n.Txn + ": " + n.Message,
		Type:           typ,
		Source:         corev1.EventSource{Component: Component, Host: node.Name},
		FirstTimestamp: t,
		LastTimestamp:  t,
		Count:          1,
	}
}
