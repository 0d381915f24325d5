package engine

// The image check before each stop. The pre-flight pulled every image
// before the rollout lock; the wait for the lock (up to --cluster-wait) and
// the steps before this one give kubelet's image garbage collection time
// to remove one. So each component's images are looked up again, and
// pulled when missing, right before the step stops the component.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/journal"
)

// errImageWait: the image check before a stop got no answer (the runtime
// did not answer, or a pull ran out of time). Nothing was stopped; the
// transaction stays open for resume, never rolled back for it.
var errImageWait = errors.New("the image check before the stop got no answer")

// ImageMissingError is a step failed before its stop: an image the
// component runs after the step is not on the node and could not be
// pulled. Nothing of the component was stopped or written.
type ImageMissingError struct {
	Component, Image string
	// Reason is the pull's failure, as the pre-flight words it.
	Reason string
}

func (e *ImageMissingError) Error() string {
	return fmt.Sprintf("%s: checked again right before its stop, %s (removed since the pre-flight, by kubelet's image garbage collection?); nothing of %s was stopped or written", e.Component, e.Reason, e.Component)
}

// imagesBeforeStop makes sure the images comp runs after its step of r are
// on the node, pulling a missing one, right before the step stops comp.
// One that cannot be pulled fails the step (*ImageMissingError), unless
// the transaction let ImagePull through (then kubelet pulls it, as the
// operator chose). No answer pauses (errImageWait). No runtime here (and
// none required) checks nothing, as the pre-flight.
func (e *Engine) imagesBeforeStop(ctx context.Context, r *run, comp string) error {
	tg, ok := r.txn.Target(comp)
	if e.images.Connect == nil || !ok || len(tg.Manifest) == 0 {
		return nil // a stop runs no image
	}
	refs, err := podImages(tg.Manifest)
	if err != nil {
		return fmt.Errorf("%s: images of its target: %w", comp, err)
	}
	rt, err := e.runtime.get(e.images.Connect)
	if err != nil {
		if e.images.Require {
			return fmt.Errorf("%w: %s: %v (--require-cri); nothing of %s was stopped", errImageWait, comp, err, comp)
		}
		e.noRuntimeOnce.Do(func() {
			e.log.Warn("no container runtime answers: the images are not checked or pulled before anything stops; kubelet pulls each when it starts its pod", "err", err)
		})
		return nil
	}
	timeout := e.images.PullTimeout
	if timeout == 0 {
		timeout = DefaultPullTimeout
	}
	ignored := slices.ContainsFunc(r.txn.IgnoredChecks, func(c journal.IgnoredCheck) bool { return c.Check == CheckImagePull })
	for _, ref := range refs {
		f, unsure := e.ensureImage(ctx, rt, NeededImage{Ref: ref, Components: []string{comp}}, timeout, r.txn.ID, journal.PhaseApplying)
		switch {
		case f == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case unsure:
			return fmt.Errorf("%w: %s; nothing of %s was stopped: resume checks it again", errImageWait, f.Message, comp)
		case ignored:
			e.log.Warn("an image is not on the node and ImagePull was let through: kubelet pulls it after the stop", "component", comp, "image", ref, "reason", f.Message)
		default:
			return &ImageMissingError{Component: comp, Image: ref, Reason: f.Message}
		}
	}
	return nil
}

// dialedRuntime is the image runtime dialed once: the pre-flight dials it
// for each transaction, and the checks before the stops reuse it (a resume,
// which has no pre-flight, dials it at its first check).
type dialedRuntime struct {
	dialed bool
	rt     ImageRuntime
	err    error
}

func (d *dialedRuntime) get(connect func() (ImageRuntime, error)) (ImageRuntime, error) {
	if !d.dialed {
		d.rt, d.err = connect()
		d.dialed = true
	}
	return d.rt, d.err
}
