package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// The defects of a node's fault model (issue 12) that live in the engine,
// each shown on the kubelet model: a reboot or power cut mid-restore, a
// stop that times out, a manifest edited between a crash and resume, the
// old process restarted in place before a resumed write, and kubelet never
// acting on etcd's new manifest.

// failingRun runs the upgrade whose kube-scheduler never listens (so it
// rolls back), crashed by hook, and reports whether the hook crashed it.
func (n *memNode) failingRun(hook func(fault.Point)) bool {
	n.t.Helper()
	n.before = n.manifests()
	_, died := survive(func() error {
		_, err := n.engine(hook).Run(n.t.Context(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
		return err
	})
	return died
}

// upgradeCrashedAt runs an upgrade that commits, crashed at pt.
func (n *memNode) upgradeCrashedAt(pt fault.Point) {
	n.t.Helper()
	n.before = n.manifests()
	fired := false
	if _, died := survive(func() error {
		_, err := n.engine(crashAt(pt, &fired)).Run(n.t.Context(), release(n.st, true, "", ""), nil)
		return err
	}); !died {
		n.t.Fatalf("the upgrade never reached %s", pt)
	}
}

// edit changes comp's manifest on disk the way a hand edit does: a flag
// added, which kubelet sees as a new pod.
func (n *memNode) edit(comp string) {
	n.t.Helper()
	b, err := n.store.Read(comp)
	if err != nil {
		n.t.Fatal(err)
	}
	pod, err := manifest.DecodePod(b)
	if err != nil {
		n.t.Fatal(err)
	}
	pod.Spec.Containers[0].Command = append(pod.Spec.Containers[0].Command, "--v=9")
	out, err := manifest.Encode(pod)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(n.store.Path(comp), out, 0o600); err != nil {
		n.t.Fatal(err)
	}
}

func (n *memNode) expectConverged(want Outcome, ignore ...string) {
	n.t.Helper()
	for _, p := range n.converged(want) {
		if !slices.ContainsFunc(ignore, func(s string) bool { return strings.Contains(p, s) }) {
			n.t.Error(p)
		}
	}
	if n.t.Failed() {
		n.t.Logf("engine events:\n%s\nmodel events:\n%s", strings.Join(n.events, "\n"), strings.Join(n.k.Events(), "\n"))
	}
}

func (n *memNode) resume(want Outcome) {
	n.t.Helper()
	res, err := n.engine(nil).Resume(n.t.Context())
	switch want {
	case Committed:
		if err != nil || res.Outcome != Committed {
			n.t.Errorf("Resume: %+v %v, want committed", res, err)
		}
	case RolledBack:
		if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
			n.t.Errorf("Resume: %+v %v, want rolled back", res, err)
		}
	}
}

// Defect 1: a power cut in the middle of the rollback's restore (the
// first manifests written with their stamps, the rest not) and the reboot:
// kubelet starts the restored components from the stamped bytes before
// resume; resume must count them as replaced, not wait for a replacement
// that never comes.
func TestRollbackResumedAfterPowerCutInsideRestore(t *testing.T) {
	n := newMemNode(t)
	var upgraded map[string][]byte
	fired := false
	died := n.failingRun(func(p fault.Point) {
		switch {
		case p == fault.AfterRollingBack:
			upgraded = n.manifests()
		case p == fault.AfterRestore && !fired:
			fired = true
			panic(crashed{p})
		}
	})
	if !died {
		t.Fatal("the rollback never reached after-restore")
	}
	// The cut came after etcd's and kube-apiserver's writes: the other two
	// still hold the upgrade's bytes.
	for _, comp := range []string{nodestate.ControllerManager, nodestate.Scheduler} {
		if err := os.WriteFile(n.store.Path(comp), upgraded[manifest.FileName(comp)], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.crash(true)
	n.resume(RolledBack)
	n.expectConverged(RolledBack)
}

// stopFails is the model's store whose Stop of etcd removes the manifest
// and then times out, as a stop whose process does not exit in time does.
type stopFails struct{ modelStore }

func (s stopFails) Stop(_ context.Context, st *nodestate.NodeState, name string, _ time.Duration) error {
	if _, err := s.Remove(name); err != nil {
		return err
	}
	return errors.New("waiting for etcd to exit: timed out after 10s; last failure: still running: pid 7 (started tick 3)")
}

// Defect 2: a rollback whose etcd stop (for its data restore) fails after
// the manifest was removed must not close the transaction: the node has no
// etcd manifest. It stays open, and resume finishes the rollback. (etcd
// refuses the downgrade, so the data is restored and etcd stopped for it.)
func TestRollbackEtcdStopFailureStaysOpen(t *testing.T) {
	n := newMemNode(t)
	n.etcd.refuse = etcddata.ErrDowngradeRefused
	n.before = n.manifests()
	res, err := n.engineWith(stopFails{modelStore{n.store, n.k}}, nil).Run(t.Context(), release(n.st, true, nodestate.Scheduler, standin.ModeNeverListen), nil)
	if !errors.Is(err, ErrStillOpen) {
		t.Fatalf("Run: %+v %v: want the transaction left open", res, err)
	}
	open, err := n.j.OpenTxn()
	if err != nil || open == nil || open.Phase != journal.PhaseRollingBack {
		t.Fatalf("open transaction: %+v %v, want one rolling back", open, err)
	}
	if _, err := n.store.Read(nodestate.Etcd); err == nil {
		t.Fatal("etcd's manifest is back although its stop failed")
	}
	n.resume(RolledBack)
	n.expectConverged(RolledBack)
}

// Defect 3, rollback: a manifest edited after the restore and before
// resume is put back to the snapshot's bytes, not kept and stamped.
func TestRollbackResumeRewritesAnEditedManifest(t *testing.T) {
	n := newMemNode(t)
	fired := false
	if !n.failingRun(crashAt(fault.BeforeWrite.InRollback(nodestate.Scheduler), &fired)) {
		t.Fatal("no crash")
	}
	n.crash(false)
	n.edit(nodestate.Scheduler)
	n.edit(nodestate.KubeAPIServer) // its step is done already
	n.resume(RolledBack)
	n.expectConverged(RolledBack)
}

// Defect 3, upgrade: a manifest edited after its step was journaled done
// (and after the last step) is written again by resume, with the waits.
func TestResumeRewritesAnEditedDoneStep(t *testing.T) {
	for _, pt := range []fault.Point{fault.BeforeWrite.Of(nodestate.Scheduler), fault.AfterApply} {
		t.Run(string(pt), func(t *testing.T) {
			n := newMemNode(t)
			n.upgradeCrashedAt(pt)
			n.crash(false)
			n.edit(nodestate.KubeAPIServer)
			n.resume(Committed)
			n.expectConverged(Committed)
		})
	}
}

// Defect 5: a same-boot resume of a step whose write never happened, after
// kubelet restarted the old process in place (liveness, OOM): that process
// must not pass for the replacement. kubelet acts on the write a few looks
// later, as a real one does.
func TestSameBootResumeDoesNotTakeARestartForTheReplacement(t *testing.T) {
	n := newMemNode(t)
	n.upgradeCrashedAt(fault.BeforeWrite.Of(nodestate.Scheduler))
	n.crash(false)
	if n.k.RestartContainer("kube-scheduler") != 1 {
		t.Fatal("no scheduler process to restart")
	}
	n.k.SetLag(3)
	n.resume(Committed)
	n.expectConverged(Committed)
}

// Defect 6: kubelet never acted on etcd's new manifest (the wait for its
// replacement timed out), so the old etcd served writes all along: the
// rollback must not restore etcd's data from the backup.
func TestEtcdDataKeptWhenNoNewerEtcdRan(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	etcdPath := n.store.Path(nodestate.Etcd)
	n.k.Hold(etcdPath)
	n.etcdNeverReplaced = true
	n.onEvent = func(ev Event) {
		if ev.Step == "stop" && ev.Component == nodestate.Etcd && ev.Phase == string(journal.PhaseRollingBack) {
			// kubelet acts on the rollback's removal of the manifest (the
			// old etcd stops, on its own data) and on the restored bytes;
			// the upgrade's step found it never stopping.
			n.k.Release(etcdPath)
		}
	}
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil)
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(res.Reason, "etcd") {
		t.Fatalf("Run: %+v %v: want rolled back on etcd's replacement", res, err)
	}
	n.expectConverged(RolledBack)
}

// Defect 6, the other way: when the newer etcd ran (and the upgrade failed
// later), its data is not kept as it is, also when the rollback is resumed
// after a crash that came before the decision: it is downgraded with
// etcd's protocol (issue 30), or restored when etcd refuses that.
func TestEtcdDataRestoredWhenTheNewerEtcdRan(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refuse), func(t *testing.T) {
			n := newMemNode(t)
			if refuse {
				n.etcd.refuse = etcddata.ErrDowngradeRefused
			}
			fired := false
			if !n.failingRun(crashAt(fault.AfterRollingBack, &fired)) {
				t.Fatal("no crash")
			}
			n.crash(false)
			n.resume(RolledBack)
			want := [2]int{1, 0} // downgrades, restores
			if refuse {
				want = [2]int{0, 1}
			}
			if got := [2]int{n.etcd.downgrades, n.etcd.restores}; got != want {
				t.Errorf("etcd's data was downgraded %d and restored %d times, want %d and %d", got[0], got[1], want[0], want[1])
			}
			n.expectConverged(RolledBack)
		})
	}
}

// diskFull is the model's store whose writes fail with ENOSPC while full
// is set, as a full filesystem fails them (nothing written).
type diskFull struct {
	modelStore
	full *bool
}

func (s diskFull) err(name string) error {
	return &fs.PathError{Op: "write", Path: s.Path(name), Err: syscall.ENOSPC}
}

func (s diskFull) Put(name string, b []byte) (bool, error) {
	if *s.full {
		return false, s.err(name)
	}
	return s.modelStore.Put(name, b)
}

func (s diskFull) PutMode(name string, b []byte, perm fs.FileMode) (bool, error) {
	if *s.full {
		return false, s.err(name)
	}
	return s.modelStore.PutMode(name, b, perm)
}

// An I/O error in a rollback (the disk filled up) leaves the transaction
// open with a message that says to resume, not closed rollback-failed: the
// node is half restored, and resume finishes it once there is room.
func TestRollbackIOErrorStaysOpen(t *testing.T) {
	for _, etcd := range []bool{false, true} {
		t.Run(fmt.Sprintf("etcd-upgraded=%v", etcd), func(t *testing.T) {
			n := newMemNode(t)
			n.before = n.manifests()
			full := false
			e := n.engineWith(diskFull{modelStore{n.store, n.k}, &full}, func(p fault.Point) {
				if p == fault.AfterRollingBack {
					full = true
				}
			})
			res, err := e.Run(t.Context(), release(n.st, etcd, nodestate.Scheduler, standin.ModeNeverListen), nil)
			if !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "no space left on device") {
				t.Fatalf("Run: %+v %v: want the transaction left open, saying why", res, err)
			}
			if open, err := n.j.OpenTxn(); err != nil || open == nil || open.Phase != journal.PhaseRollingBack {
				t.Fatalf("open transaction: %+v %v, want one rolling back", open, err)
			}
			full = false
			n.resume(RolledBack)
			n.expectConverged(RolledBack)
		})
	}
}
