package kubeapi

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func node(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

// TestPosterPostsInOrder: every Notice becomes an Event on the Node (found
// by name, or else by address) in order, with the transaction, reason,
// type and source; the outcome lands in the annotations.
func TestPosterPostsInOrder(t *testing.T) {
	for _, ref := range []NodeRef{{Name: "cp-1", Address: "10.0.0.11"}, {Name: "etcd-member-name", Address: "10.0.0.11"}} {
		cs := fakeAPI(node("cp-1", "10.0.0.11"), node("cp-2", "10.0.0.12"))
		p := NewPoster(cs, ref, quiet)
		t0 := time.Now()
		p.Post(Notice{Time: t0, Txn: "t1", Reason: "TransactionBegan", Message: "upgrade v1.36.3 -> v1.37.2"})
		p.Post(Notice{Time: t0.Add(time.Millisecond), Txn: "t1", Reason: "ComponentReplaced", Message: "etcd replaced"})
		p.Post(Notice{Time: t0.Add(2 * time.Millisecond), Txn: "t1", Reason: "TransactionRolledBack", Message: "rolled back", Warning: true})
		p.Annotate(Outcome{Txn: "t1", Outcome: "rolled-back", Release: "v1.36.3"})
		if err := p.Close(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		evs, err := cs.c.Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
		var reasons []string
		for _, ev := range evs.Items {
			reasons = append(reasons, ev.Reason+"/"+ev.Type)
			if ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "cp-1" || ev.InvolvedObject.UID != "uid-cp-1" ||
				ev.Source.Component != Component || ev.Annotations[AnnotationEventTxn] != "t1" || !strings.HasPrefix(ev.Message, "transaction t1: ") {
				t.Errorf("%s: event %+v", ref.Name, ev)
			}
		}
		if want := []string{"TransactionBegan/Normal", "ComponentReplaced/Normal", "TransactionRolledBack/Warning"}; !slices.Equal(reasons, want) {
			t.Errorf("%s: events %v, want %v", ref.Name, reasons, want)
		}
		n, err := cs.c.Nodes().Get(t.Context(), "cp-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a := n.Annotations; a[AnnotationTransaction] != "t1" || a[AnnotationOutcome] != "rolled-back" || a[AnnotationRelease] != "v1.36.3" {
			t.Errorf("%s: annotations %v", ref.Name, a)
		}
	}
}

// TestPosterNeverWaitsOnTheAPI: with the API server down, Post and
// Annotate return at once, and Close gives up after one more try instead
// of its whole wait, saying how many were not posted.
func TestPosterNeverWaitsOnTheAPI(t *testing.T) {
	p := NewPoster(downAPI(t), NodeRef{Name: "cp-1"}, quiet)
	t0 := time.Now()
	for i := range 50 {
		p.Post(Notice{Time: time.Now(), Txn: "t1", Reason: "R", Message: string(rune('a' + i%26))})
	}
	p.Annotate(Outcome{Txn: "t1", Outcome: "committed"})
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Errorf("queueing 51 items took %s", d)
	}
	t0 = time.Now()
	err := p.Close(10 * time.Second)
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Close(10s) with the API server down took %s, want at once", d)
	}
	if err == nil || !strings.Contains(err.Error(), "51 of 51") {
		t.Errorf("Close: %v, want 51 of 51 not posted", err)
	}
}

// TestPosterWithoutNode: no Node object for the node drops what is queued,
// with ErrNoNode, without waiting.
func TestPosterWithoutNode(t *testing.T) {
	p := NewPoster(fakeAPI(node("other", "10.0.0.99")), NodeRef{Name: "cp-1", Address: "10.0.0.11"}, quiet)
	p.Post(Notice{Time: time.Now(), Txn: "t1", Reason: "R", Message: "m"})
	t0 := time.Now()
	if err := p.Close(10 * time.Second); !errors.Is(err, ErrNoNode) || time.Since(t0) > 2*time.Second {
		t.Fatalf("Close: %v after %s, want ErrNoNode at once", err, time.Since(t0))
	}
}

// TestPosterGivesUpOnAWrongCertificate: an API server whose certificate
// the kubeconfig's CA does not verify will not verify later either: the
// Poster stops at once instead of retrying until Close.
func TestPosterGivesUpOnAWrongCertificate(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	p := NewPoster(clientOf(t, srv.URL, false), NodeRef{Name: "cp-1"}, quiet)
	p.Post(Notice{Time: time.Now(), Txn: "t1", Reason: "R", Message: "m"})
	time.Sleep(200 * time.Millisecond) // the first try fails
	p.Annotate(Outcome{Txn: "t1", Outcome: "committed"})
	t0 := time.Now()
	var cert *tls.CertificateVerificationError
	if err := p.Close(10 * time.Second); !errors.As(err, &cert) || !strings.Contains(err.Error(), "2 of 2") || time.Since(t0) > 2*time.Second {
		t.Fatalf("Close: %v after %s, want the certificate error for 2 of 2 at once", err, time.Since(t0))
	}
}
