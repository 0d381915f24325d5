package haload

// This file holds the member probe: how many of the cluster's etcd members
// answer, sampled throughout a rollout, so that a test can say how many
// were ever down at once (issue 26: never more than one of three).

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// SampleInterval is how often the member probe asks every member;
// MemberTimeout is how long one member has to answer: a member that is
// running answers a status request in milliseconds even on a loaded
// machine, while a stopped one refuses the connection at once, so the
// margin only keeps a slow answer from counting as a member down.
const (
	SampleInterval = 100 * time.Millisecond
	MemberTimeout  = 2 * time.Second
)

// Members is the running member probe.
type Members struct {
	stop chan struct{}
	done sync.WaitGroup

	mu       sync.Mutex
	samples  int
	maxDown  int
	worst    []string // the members down in the first sample with maxDown down
	worstAt  time.Time
	down     map[string]int // samples in which each member was down
	lastTick time.Time
	maxGap   time.Duration // the longest time between two samples' starts
}

// StartMembers starts the probe on c: every SampleInterval it sends a
// status request to each member's client URL (a new connection each time,
// so that a member that came back is seen at once), all members at once,
// and counts the members that did not answer within MemberTimeout. A
// sample does not wait for the one before it. It stops at MaxDown's first
// call, or when t ends.
func StartMembers(t *testing.T, c *testbed.Cluster) *Members {
	t.Helper()
	tlsCfg, err := c.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	eps := c.Endpoints()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsCfg, DialTimeout: MemberTimeout, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]string, len(eps))
	for i, ep := range eps {
		names[ep] = c.Nodes[i].State.NodeName
	}
	m := &Members{stop: make(chan struct{}), down: map[string]int{}}
	var samples sync.WaitGroup
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		tick := time.NewTicker(SampleInterval)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				samples.Wait()
				cli.Close()
				return
			case now := <-tick.C:
				m.mu.Lock()
				if !m.lastTick.IsZero() {
					m.maxGap = max(m.maxGap, now.Sub(m.lastTick))
				}
				m.lastTick = now
				m.mu.Unlock()
				samples.Add(1)
				go func() {
					defer samples.Done()
					m.sample(cli, eps, names, now)
				}()
			}
		}
	}()
	t.Cleanup(m.halt)
	return m
}

// sample asks every member at once and records how many did not answer.
func (m *Members) sample(cli *clientv3.Client, eps []string, names map[string]string, at time.Time) {
	answered := make([]bool, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), MemberTimeout)
			defer cancel()
			_, err := cli.Status(ctx, ep)
			answered[i] = err == nil
		})
	}
	wg.Wait()
	var down []string
	for i, ok := range answered {
		if !ok {
			down = append(down, names[eps[i]])
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	for _, n := range down {
		m.down[n]++
	}
	if len(down) > m.maxDown || (len(down) == m.maxDown && len(down) > 0 && at.Before(m.worstAt)) {
		m.maxDown, m.worst, m.worstAt = len(down), down, at
	}
}

func (m *Members) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.done.Wait()
}

// MemberFigures are what the probe saw.
type MemberFigures struct {
	// Samples is how many samples completed; MaxGap the longest time
	// between two samples' starts.
	Samples int
	MaxGap  time.Duration
	// MaxDown is the most members that did not answer in one sample;
	// Worst names them, at WorstAt, the first sample with that many.
	MaxDown int
	Worst   []string
	WorstAt time.Time
	// Down is, for each member ever down, in how many samples.
	Down map[string]int
}

// String says what the probe saw, for a test's log.
func (f MemberFigures) String() string {
	var per []string
	for n, k := range f.Down {
		per = append(per, fmt.Sprintf("%s %d", n, k))
	}
	sort.Strings(per)
	s := fmt.Sprintf("%d samples (longest gap %s), at most %d members down at once", f.Samples, f.MaxGap.Round(time.Millisecond), f.MaxDown)
	if f.MaxDown > 0 {
		s += fmt.Sprintf(" (first %s: %s)", f.WorstAt.Format("15:04:05.000"), strings.Join(f.Worst, ", "))
	}
	if len(per) > 0 {
		s += "; samples with a member down: " + strings.Join(per, ", ")
	}
	return s
}

// Stop stops the probe, waits for the samples under way and returns what
// it saw.
func (m *Members) Stop() MemberFigures {
	m.halt()
	m.mu.Lock()
	defer m.mu.Unlock()
	down := make(map[string]int, len(m.down))
	for n, k := range m.down {
		down[n] = k
	}
	return MemberFigures{Samples: m.samples, MaxGap: m.maxGap, MaxDown: m.maxDown, Worst: m.worst, WorstAt: m.worstAt, Down: down}
}
