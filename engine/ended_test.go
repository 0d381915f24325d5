package engine

import (
	"errors"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestEndedHook: Config.Ended hears of a commit with the node state the
// node now runs, and of a rollback with the one it runs again, once each,
// after the journal holds the end.
func TestEndedHook(t *testing.T) {
	for _, c := range []struct {
		name    string
		fail    string
		want    Outcome
		runsNew bool
	}{
		{"commit", "", Committed, true},
		{"rollback", nodestate.Scheduler, RolledBack, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newMemNode(t)
			var ends []End
			e := n.engine(nil)
			e.onEnd = func(end End) {
				h, err := n.j.History(1)
				if err != nil || len(h) != 1 || h[0].ID != end.Txn || h[0].Phase.Open() {
					t.Errorf("Ended called before the journal holds the end: %+v %v", h, err)
				}
				ends = append(ends, end)
			}
			res, err := e.Run(t.Context(), release(n.st, false, c.fail, standin.ModeNeverListen), nil)
			if res.Outcome != c.want || (c.want == Committed) != (err == nil) || (c.want == RolledBack && !errors.Is(err, ErrRolledBack)) {
				t.Fatalf("Run: %+v %v, want %s", res, err, c.want)
			}
			if len(ends) != 1 {
				t.Fatalf("Ended called %d times, want once: %+v", len(ends), ends)
			}
			end := ends[0]
			if end.Txn != res.Txn || end.Outcome != c.want || end.Kind != "upgrade" {
				t.Errorf("End %+v, want txn %s outcome %s kind upgrade", end, res.Txn, c.want)
			}
			if end.Target == nil || end.Target.KubernetesVersion != "v1.34.5" {
				t.Errorf("End.Target %+v, want the release's v1.34.5", end.Target)
			}
			if end.From == nil || end.From.KubernetesVersion != n.st.KubernetesVersion {
				t.Errorf("End.From %+v, want the node's %s", end.From, n.st.KubernetesVersion)
			}
			want := n.st.KubernetesVersion
			if c.runsNew {
				want = "v1.34.5"
			}
			if end.State == nil || end.State.KubernetesVersion != want {
				t.Errorf("End.State runs %v, want %s", end.State, want)
			}
			if c.want == RolledBack && end.Reason == "" {
				t.Error("a rollback's End has no reason")
			}
		})
	}
}
