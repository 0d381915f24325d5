package engine

// The image pre-flight: before a transaction stops anything, every image
// it will run and every image its rollback may put back is on the node,
// present in the container runtime or pulled through it. A pull during the
// transaction would be downtime, and a missing image would be found only
// after the old component was stopped.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/cri"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckImagePull is the pre-flight check that every image a transaction
// needs is present in the container runtime or was pulled through it.
const CheckImagePull = "ImagePull"

// DefaultPullTimeout bounds one image pull where Images.PullTimeout is 0:
// kube-apiserver's image (about 30 MB compressed) over a slow link.
const DefaultPullTimeout = 10 * time.Minute

// ImageRuntime is the container runtime the images are pulled through.
// *cri.Client satisfies it.
type ImageRuntime interface {
	Status(ctx context.Context, ref string) (cri.Image, error)
	Pull(ctx context.Context, ref string) (cri.Image, error)
}

var _ ImageRuntime = (*cri.Client)(nil)

// Images configures the image pre-flight.
type Images struct {
	// Connect reaches the runtime; an error wrapping cri.ErrNoRuntime
	// means there is none here (the test bed's kubelet stand-in): the
	// engine says so once and goes on without the check, unless Require.
	// Nil: the check is not made at all (an embedder without a runtime).
	Connect func() (ImageRuntime, error)
	// Require refuses a transaction when no runtime answers.
	Require bool
	// PullTimeout bounds each pull (DefaultPullTimeout when 0).
	PullTimeout time.Duration
}

// ErrNoRuntime is the refusal of a transaction when no runtime answers
// and Images.Require is set. Nothing was written.
var ErrNoRuntime = errors.New("no container runtime answers and one is required")

// NeededImage is one image a transaction needs on the node.
type NeededImage struct {
	Ref string `json:"image"`
	// Components are the components that run it after the transaction
	// (or, for Rollback, that its rollback would put back on it).
	Components []string `json:"components"`
	// Rollback: only the rollback needs it (the image a component runs now).
	Rollback bool `json:"rollback"`
}

// PlanImages is every image the transaction of p needs: the images of
// each manifest it writes, then those of the manifests it replaces (its
// rollback writes them back), each once, in roster order.
func PlanImages(p *Plan) ([]NeededImage, error) {
	var out []NeededImage
	add := func(b []byte, comp string, rollback bool) error {
		if b == nil {
			return nil
		}
		refs, err := podImages(b)
		if err != nil {
			return fmt.Errorf("images of %s: %w", comp, err)
		}
		for _, ref := range refs {
			i := slices.IndexFunc(out, func(n NeededImage) bool { return n.Ref == ref })
			if i < 0 {
				out = append(out, NeededImage{Ref: ref, Rollback: rollback})
				i = len(out) - 1
			}
			if !slices.Contains(out[i].Components, comp) {
				out[i].Components = append(out[i].Components, comp)
			}
		}
		return nil
	}
	for _, c := range p.Changes {
		if err := add(c.After, c.Component, false); err != nil {
			return nil, err
		}
	}
	for _, c := range p.Changes {
		if err := add(c.Before, c.Component, true); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TargetImages is every image the node runs once at st: the images of
// every component's render, in roster order, each once (what
// `images list` prints and `images pull` pulls).
func TargetImages(st *nodestate.NodeState) ([]NeededImage, error) {
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		return nil, err
	}
	p := &Plan{}
	for _, comp := range manifest.NamesFor(st) {
		b, err := manifest.RenderBytes(st, prof, comp, "")
		if err != nil {
			return nil, err
		}
		p.Changes = append(p.Changes, Change{Component: comp, After: b})
	}
	return PlanImages(p)
}

// podImages is the image of every container and init container of the
// pod manifest b.
func podImages(b []byte) ([]string, error) {
	pod, err := manifest.DecodePod(b)
	if err != nil {
		return nil, err
	}
	var refs []string
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if c.Image != "" && !slices.Contains(refs, c.Image) {
			refs = append(refs, c.Image)
		}
	}
	return refs, nil
}

// ensureImages is the ImagePull check of p, before anything is written:
// each image p needs is looked up in the runtime and pulled when missing,
// with a progress event per image. Every image that is neither present
// nor pulled is a finding; all are tried. No runtime is no finding (said
// once), or ErrNoRuntime when one is required.
func (e *Engine) ensureImages(ctx context.Context, p *Plan) ([]versions.Finding, error) {
	if e.images.Connect == nil {
		return nil, nil
	}
	need, err := PlanImages(p)
	if err != nil || len(need) == 0 {
		return nil, err
	}
	e.runtime = dialedRuntime{}
	rt, err := e.runtime.get(e.images.Connect)
	if err != nil {
		if e.images.Require {
			return nil, fmt.Errorf("%w: %v; nothing was written (--require-cri)", ErrNoRuntime, err)
		}
		e.noRuntimeOnce.Do(func() {
			// Debug: the caller says it to the operator, once and short
			// (the CLI's noRuntime).
			e.log.Debug("no container runtime answers: the images are not checked or pulled before anything stops; kubelet pulls each when it starts its pod", "err", err)
		})
		return nil, nil
	}
	timeout := e.images.PullTimeout
	if timeout == 0 {
		timeout = DefaultPullTimeout
	}
	var findings []versions.Finding
	for _, n := range need {
		if f, _ := e.ensureImage(ctx, rt, n, timeout, "", journal.PhasePlanned); f != nil {
			findings = append(findings, *f)
		}
	}
	return findings, nil
}

// ensureImage makes sure n is on the node, with progress events of
// transaction id in phase p: a finding when it is not. unsure says the
// finding is no answer of the runtime: it did not answer the lookup, or
// the pull ran out of --image-pull-timeout.
func (e *Engine) ensureImage(ctx context.Context, rt ImageRuntime, n NeededImage, timeout time.Duration, id string, p journal.Phase) (f *versions.Finding, unsure bool) {
	comp := n.Components[0]
	purpose := "for " + strings.Join(n.Components, ", ")
	if n.Rollback {
		purpose = "for the rollback of " + strings.Join(n.Components, ", ")
	}
	var gaveUp string
	img, err := rt.Status(ctx, n.Ref)
	if err == nil && img.Present {
		if p != journal.PhasePlanned {
			// Checked again before a stop: said only when pulled.
			e.log.Debug("image present", "image", n.Ref, "component", comp)
			return nil, false
		}
		e.event(id, p, "image", comp, "", fmt.Sprintf("image %s present (%s) %s", n.Ref, size(img.Size), purpose))
		return nil, false
	}
	unsure = err != nil
	if err == nil {
		start := time.Now()
		e.event(id, p, "image-pull", comp, "the pull of "+n.Ref, fmt.Sprintf("pulling image %s %s", n.Ref, purpose))
		pctx, cancel := context.WithTimeout(ctx, timeout)
		img, err = rt.Pull(pctx, n.Ref)
		cancel()
		if err == nil {
			e.event(id, p, "image-pulled", comp, "", fmt.Sprintf("image %s pulled (%s in %s) %s", n.Ref, size(img.Size), time.Since(start).Round(time.Millisecond), purpose))
			return nil, false
		}
		if pctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			gaveUp = fmt.Sprintf(" (gave up after %s, --image-pull-timeout)", timeout)
			unsure = true
		}
	}
	msg := fmt.Sprintf("image %s (%s) is not on the node and was not pulled: %v%s", n.Ref, purpose, err, gaveUp)
	if pe := (*cri.PullError)(nil); errors.As(err, &pe) {
		msg = fmt.Sprintf("image %s (%s) is not on the node, and the container runtime at %s could not pull it: %s%s", n.Ref, purpose, pe.Endpoint, pe.Reason, gaveUp)
	}
	return &versions.Finding{Check: CheckImagePull, Component: comp, Message: msg}, unsure
}

// size is a byte count for a progress line.
func size(b uint64) string {
	if b == 0 {
		return "size unknown"
	}
	return fmt.Sprintf("%.1f MB", float64(b)/1e6)
}
