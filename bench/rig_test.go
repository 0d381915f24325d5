package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/stats"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/versions"
)

// rig is a test bed node with a journal holding its state and an engine
// over both, running in this process. Every engine event is recorded with
// this process's CPU time at the moment it was emitted (the engine calls
// its event hook synchronously, on its own goroutine).
type rig struct {
	n *testbed.Node
	j *journal.Journal
	e *engine.Engine

	mu  sync.Mutex
	evs []stamped
}

// stamped is an engine event and the CPU time (RUSAGE_SELF, user plus
// system) this process had used when the engine emitted it.
type stamped struct {
	engine.Event
	CPU time.Duration
	// Switches is how many times this process's threads had given up
	// their CPU (voluntary and involuntary context switches, RUSAGE_SELF):
	// each voluntary one is a sleep that a wakeup ended.
	Switches int64
}

// cpuNow is this process's CPU time so far, every thread, user plus system.
func cpuNow() (time.Duration, int64) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

func newRig(b *testing.B, opts testbed.Options, dl engine.Deadlines) *rig {
	b.Helper()
	root := b.TempDir()
	logf, err := os.Create(filepath.Join(root, "bench.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logf.Close() })
	log := slog.New(slog.NewTextHandler(logf, nil))
	opts.Root = filepath.Join(root, "node")
	opts.Log = log
	n := testbed.Start(b, opts)
	j, err := journal.Open(filepath.Join(root, "state", "stratum.db"), journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { j.Close() })
	if err := j.PutNodeState(n.State); err != nil {
		b.Fatal(err)
	}
	r := &rig{n: n, j: j}
	r.e, err = engine.New(engine.Config{
		Journal: j, Store: n.Store, Scanner: n.Scanner,
		Snapshots: filepath.Join(root, "state", "snapshots"),
		Deadlines: dl, Log: log,
		Events: func(ev engine.Event) {
			c, sw := cpuNow()
			r.mu.Lock()
			r.evs = append(r.evs, stamped{Event: ev, CPU: c, Switches: sw})
			r.mu.Unlock()
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// events returns the engine events of transaction txn, in order.
func (r *rig) events(txn string) []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []stamped
	for _, ev := range r.evs {
		if ev.Txn == txn {
			out = append(out, ev)
		}
	}
	return out
}

// find is the first event of evs with step and component.
func find(evs []stamped, step, comp string) (stamped, bool) {
	for _, ev := range evs {
		if ev.Step == step && ev.Component == comp {
			return ev, true
		}
	}
	return stamped{}, false
}

// doneRecord is the applying-phase done record of comp in txn and the
// processes it names (the identity the engine journaled once comp was
// replaced and active).
func (r *rig) doneRecord(txn, comp string) (journal.Record, []proc.Process, error) {
	recs, err := r.j.Records(txn)
	if err != nil {
		return journal.Record{}, nil, err
	}
	for _, rec := range recs {
		if rec.Phase == journal.PhaseApplying && rec.Step == "done" && rec.Component == comp {
			return rec, rec.Processes, nil
		}
	}
	return journal.Record{}, nil, fmt.Errorf("transaction %s has no done record of %s", txn, comp)
}

// standinEvent is the last stand-in event of kind from comp's process pid
// at or before t (pids are reused across many replacements; the latest one
// before the engine finished is this replacement's).
func standinEvent(evs []standin.Event, comp string, pid int, kind string, after, before time.Time) (standin.Event, bool) {
	var out standin.Event
	ok := false
	for _, ev := range evs {
		if ev.Component == comp && ev.PID == pid && ev.Event == kind && !ev.Time.Before(after) && !ev.Time.After(before) {
			out, ok = ev, true
		}
	}
	return out, ok
}

// run is r.e.Run letting through the pre-flight check that refuses a
// downgrade: the benchmarks go back and forth between two patch versions.
func (r *rig) run(rel *engine.Release) (engine.Result, error) {
	return r.e.RunWith(context.Background(), rel, nil, engine.UpgradeOptions{IgnorePreflight: []string{versions.CheckKubernetesDowngrade}})
}

// release moves the images named in images to their new references and
// keeps the node's Kubernetes version.
func release(version string, images map[string]string) *engine.Release {
	return &engine.Release{APIVersion: engine.ReleaseAPIVersion, Kind: engine.ReleaseKind, KubernetesVersion: version, Images: images}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of ds.
func median(ds []time.Duration) time.Duration { return stats.Quantile(ds, 0.5) }
