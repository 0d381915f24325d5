package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// stopAt runs fn on e with the crash hook armed at point p (crashAt,
// memmatrix_test.go): the transaction is left exactly as journaled there.
// It returns whether the point was reached.
func stopAt(e *Engine, p fault.Point, fn func()) bool {
	fired := false
	e.crash = crashAt(p, &fired)
	survive(func() error { fn(); return nil })
	e.crash = nil
	return fired
}

// A transaction writes exactly the bytes it planned. The cis profile's audit
// policy is edited between a crash (before kube-apiserver's write) and
// resume: the resumed transaction still writes the planned kube-apiserver
// manifest, whose audit-policy annotation is the hash of the policy the
// plan read; the next plan shows the edit as a kube-apiserver change.
func TestResumeWritesPlannedBytes(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{StateFile: "testdata/states/cis.yaml"})
	dl := Deadlines{Replace: 20 * time.Second, Active: 10 * time.Second, Stop: 10 * time.Second, Soak: 500 * time.Millisecond, Release: 300 * time.Millisecond}
	rel := release(f.node.State, false, "", standin.ModeHealthy)
	ctx := context.Background()

	e := f.engine(f.node.Scanner, dl)
	if !stopAt(e, fault.BeforeWrite.Of(nodestate.KubeAPIServer), func() { e.Run(ctx, rel, nil) }) {
		t.Fatal("the run never reached before-write:kube-apiserver")
	}
	open, err := f.j.OpenTxn()
	if err != nil || open == nil {
		t.Fatalf("no open transaction after the crash: %v", err)
	}
	planned, ok := open.Target(nodestate.KubeAPIServer)
	if !ok || len(planned.Manifest) == 0 {
		t.Fatalf("the open transaction has no kube-apiserver target: %+v", open.Targets)
	}
	policy := f.node.State.Profile.AuditPolicyFile
	old, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	edited := append(bytes.Clone(old), []byte("# edited between the crash and resume\n")...)
	if err := os.WriteFile(policy, edited, 0o644); err != nil {
		t.Fatal(err)
	}

	res, err := f.engine(f.node.Scanner, dl).Resume(ctx)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	got, err := f.node.Store.Read(nodestate.KubeAPIServer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, planned.Manifest) {
		t.Fatalf("resume wrote other kube-apiserver bytes than planned:\n got %s\nwant %s", got, planned.Manifest)
	}
	pod, err := manifest.DecodePod(got)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations[manifest.AuditPolicyAnnotation] != sha256hex(old) {
		t.Errorf("audit-policy annotation %q is not the hash of the policy the plan read", pod.Annotations[manifest.AuditPolicyAnnotation])
	}

	st, err := f.j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	plan, err := PlanUpgrade(t.Context(), f.node.Store, f.node.Scanner, st, rel, UpgradeOptions{})
	if err != nil {
		t.Fatalf("plan after the edit: %v", err)
	}
	if got := plan.Changed(); len(got) != 1 || got[0] != nodestate.KubeAPIServer {
		t.Errorf("plan after the edit changes %v, want [kube-apiserver]", got)
	}
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
