package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletmodel"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// answering is the kubelet model with only some components answering
// their health: up says which (nil: none).
type answering struct {
	*kubeletmodel.Kubelet
	up func(comp string) bool
}

func (a answering) Active(ctx context.Context, t proc.Target) bool {
	return a.up != nil && a.up(t.Name) && a.Kubelet.Active(ctx, t)
}

// TestDownBeforeWhenEverythingIsDown: a component that does not answer as
// the transaction begins is one a rollback will not wait for; but when
// nothing of the roster answers (kubelet or the runtime down), downBefore
// says none, so that the rollback demands the whole roster rather than
// verify nothing.
func TestDownBeforeWhenEverythingIsDown(t *testing.T) {
	n := newMemNode(t)
	n.procs = answering{Kubelet: n.k, up: func(comp string) bool { return comp != nodestate.Scheduler }}
	if down := n.engine(nil).downBefore(t.Context(), n.st); !slices.Equal(down, []string{nodestate.Scheduler}) {
		t.Errorf("downBefore with the scheduler not answering: %v; want [%s]", down, nodestate.Scheduler)
	}
	n.procs = answering{Kubelet: n.k}
	if down := n.engine(nil).downBefore(t.Context(), n.st); down != nil {
		t.Errorf("downBefore with nothing answering: %v; want none (the rollback demands the whole roster)", down)
	}
}
