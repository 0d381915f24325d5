package cli

// plan when a pre-flight check fails: as kubeadm's upgrade plan, it still
// shows what the upgrade would change, with the failures first, and exits
// with the refusal (1), so that an operator sees both at once.

import (
	"errors"
	"fmt"
	"io"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// refusal is a pre-flight refusal plan shows beside its diff; nil when
// no check refused.
type refusal struct{ pe *engine.PreflightError }

// planRefused: when *err is a pre-flight refusal, it plans again with every
// check let through and, if that plans, puts that plan in *plan, clears
// *err and returns the refusal for showPlan to print first and return
// last. Any other outcome is left as it is.
func (g *globals) planRefused(in planInput, store *manifest.Store, st *nodestate.NodeState, plan **engine.Plan, err *error) *refusal {
	var pe *engine.PreflightError
	if in.opts == nil || !errors.As(*err, &pe) {
		return nil
	}
	saved := *in.opts
	in.opts.IgnorePreflight = []string{engine.IgnoreAll}
	forced, ferr := in.plan(store, st)
	*in.opts = saved
	if ferr != nil {
		return nil
	}
	forced.Ignored = pe.Ignored // those the operator let through, not the failures
	*plan, *err = forced, nil
	return &refusal{pe: pe}
}

// failed is the checks that refused; nil without a refusal.
func (r *refusal) failed() []versions.Finding {
	if r == nil {
		return nil
	}
	return r.pe.Failed
}

// print writes the failures, before plan's header and diffs.
func (r *refusal) print(w io.Writer) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "%s is refused by %d pre-flight check(s) (run would write nothing):\n", r.pe.Subject, len(r.pe.Failed))
	for _, f := range r.pe.Failed {
		fmt.Fprintf(w, "  [ERROR %s] %s\n", f.Check, f.Message)
	}
	fmt.Fprintln(w, "What it would change once they pass (or are let through):")
}

// err is the refusal as plan's error (exit 1, with its advice); nil
// without one.
func (r *refusal) err() error {
	if r == nil {
		return nil
	}
	return r.pe
}
