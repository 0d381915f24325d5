package adopt

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// Verdict is what adopting does to one component.
type Verdict struct {
	// Name is the component.
	Name string
	// File is the manifest kubelet runs it from.
	File string
	// Restarts is set when the render of the adopted state is another pod
	// to kubelet (kubeletpod.Same is false): writing it restarts the
	// component.
	Restarts bool
	// Why lists the differences kubelet sees (kubeletpod.Diff), running
	// manifest first, render second; empty unless Restarts.
	Why []string
}

// Plan is an adoption worked out: the node state to import and what
// rendering it does to each component.
type Plan struct {
	State      *nodestate.NodeState
	Components []Verdict
	// Notes are kubeadm's configuration's disagreements with the
	// manifests (Derive).
	Notes []string
}

// Restarts is the components the plan would restart, in roster order.
func (p *Plan) Restarts() []string {
	var out []string
	for _, v := range p.Components {
		if v.Restarts {
			out = append(out, v.Name)
		}
	}
	return out
}

// Check derives src's node state (Derive), records each component's
// start-only input digest in it (NodeState.AdoptedInputs, read from the
// files the state names), and renders every component to compare it with
// the pod kubelet runs. It writes nothing.
func Check(src *Source) (*Plan, error) {
	st, notes, err := Derive(src)
	if err != nil {
		return nil, err
	}
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		return nil, fmt.Errorf("adopt: read the node's start-only input files: %w", err)
	}
	st.AdoptedInputs = map[string]string{}
	for _, c := range manifest.NamesFor(st) {
		d, err := manifest.InputsDigest(st, prof, c)
		if err != nil {
			return nil, fmt.Errorf("adopt: %w", err)
		}
		st.AdoptedInputs[c] = d
	}
	if err := resolve.Validate(st); err != nil {
		return nil, fmt.Errorf("adopt: %w", err)
	}
	plan := &Plan{State: st, Notes: notes}
	for _, c := range manifest.NamesFor(st) {
		want, err := manifest.Render(st, prof, c, "")
		if err != nil {
			return nil, fmt.Errorf("adopt: %w", err)
		}
		v := Verdict{Name: c, File: src.Files[c]}
		if running := src.Pods[c]; !kubeletpod.Same(running, want) {
			v.Restarts = true
			v.Why = kubeletpod.Diff(running, want)
		}
		plan.Components = append(plan.Components, v)
	}
	return plan, nil
}
