package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/ciq/stratum-upgrade/cri"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// goneAfterBegin sets up a run whose first component's new image leaves
// the node after the pre-flight pulled it (as kubelet's image garbage
// collection may during the wait for the rollout lock): the fake runtime
// removes it at the transaction's begin event, and then fail (if not nil)
// is injected into the next pull. It returns the engine, the release, the
// component and its new image.
func goneAfterBegin(t *testing.T, n *memNode, fail error) (*Engine, *Release, string, string) {
	t.Helper()
	e := n.engine(nil)
	f := n.imageRuntime(e)
	rel := release(n.st, false, "", standin.ModeHealthy)
	p, err := e.Plan(rel)
	if err != nil {
		t.Fatal(err)
	}
	comp := p.Changed()[0]
	img := rel.Images[comp]
	n.onEvent = func(ev Event) {
		if ev.Step != "begin" {
			return
		}
		if err := f.ImageService.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: img}); err != nil {
			t.Error(err)
		}
		if fail != nil {
			f.ImageService.InjectError("PullImage", fail)
		}
	}
	return e, rel, comp, img
}

// Defect K of issue 37: an image gone between the pre-flight and the step
// is pulled again before the component is stopped.
func TestImageGoneBeforeStopPulled(t *testing.T) {
	n := newMemNode(t)
	e, rel, comp, img := goneAfterBegin(t, n, nil)
	res, err := e.Run(t.Context(), rel, nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	pulled := firstIndex(n.events, "applying image-pulled "+comp+": image "+img+" pulled")
	stop, write := firstIndex(n.events, "applying stop "+comp+":"), firstIndex(n.events, "applying write "+comp+":")
	if pulled < 0 || (stop >= 0 && stop < pulled) || write < pulled {
		t.Fatalf("%s: pulled again at event %d, stopped at %d, written at %d:\n%s", comp, pulled, stop, write, strings.Join(n.events, "\n"))
	}
}

// An image gone between the pre-flight and the step that cannot be pulled
// fails the step before the component is stopped or its manifest written,
// naming the image; the transaction rolls back.
func TestImageGoneBeforeStopUnpullable(t *testing.T) {
	n := newMemNode(t)
	why := "failed to resolve reference: not found"
	e, rel, comp, img := goneAfterBegin(t, n, status.Error(codes.NotFound, why))
	before := n.manifests()
	res, err := e.Run(t.Context(), rel, nil)
	if res.Outcome != RolledBack || !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v, want rolled back", res, err)
	}
	if !strings.Contains(res.Reason, img) || !strings.Contains(res.Reason, why) || !strings.Contains(res.Reason, "nothing of "+comp+" was stopped or written") {
		t.Fatalf("reason %q: want the image %s, the runtime's reason and that %s was not stopped", res.Reason, img, comp)
	}
	for _, ev := range n.events {
		if strings.HasPrefix(ev, "applying stop "+comp+":") || strings.HasPrefix(ev, "applying write "+comp+":") {
			t.Fatalf("%s was stopped or written: %s", comp, ev)
		}
	}
	if after := n.manifests(); !bytes.Equal(before[comp+".yaml"], after[comp+".yaml"]) {
		t.Errorf("%s's manifest changed", comp)
	}
	txn, err := n.j.Txn(res.Txn)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := n.j.Records(txn.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Phase == journal.PhaseApplying && r.Component == comp {
			t.Errorf("%s has an applying record %s: its step began", comp, r.Step)
		}
	}
}

// answerless answers the pre-flight, then stops answering: the check
// before the stop gets no answer.
type answerless struct{ gone *bool }

func (a answerless) Status(ctx context.Context, ref string) (cri.Image, error) {
	if *a.gone {
		return cri.Image{Ref: ref}, errors.New("image status: connection refused")
	}
	return cri.Image{Ref: ref, Present: true}, nil
}

func (a answerless) Pull(ctx context.Context, ref string) (cri.Image, error) {
	return cri.Image{Ref: ref}, errors.New("pull: connection refused")
}

// No answer from the runtime right before a stop is never a rollback: the
// transaction pauses (open, exit 6), nothing of the component stopped.
func TestImageCheckBeforeStopPauses(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	gone := false
	e.images = Images{Connect: func() (ImageRuntime, error) { return answerless{&gone}, nil }}
	n.onEvent = func(ev Event) {
		if ev.Step == "begin" {
			gone = true
		}
	}
	_, err := e.Run(t.Context(), release(n.st, false, "", standin.ModeHealthy), nil)
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, ErrStillOpen) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Run: %v, want paused, still open", err)
	}
	open, err := n.j.OpenTxn()
	if err != nil || open == nil || open.Phase == journal.PhaseRollingBack {
		t.Fatalf("open transaction %+v %v: want one, not rolling back", open, err)
	}
	for _, ev := range n.events {
		if strings.HasPrefix(ev, "applying stop ") || strings.HasPrefix(ev, "applying write ") {
			t.Fatalf("a component was stopped or written: %s", ev)
		}
	}
}

// A step resumed after a crash between its mark and its stop checks its
// images again too: after a reboot, kubelet's image garbage collection has
// had all the time it needs.
func TestImageGoneBeforeResumedStopPulled(t *testing.T) {
	n := newMemNode(t)
	fired := false
	e := n.engine(crashAt(fault.BeforeWrite.Of(nodestate.Scheduler), &fired))
	f := n.imageRuntime(e)
	rel := release(n.st, true, "", "")
	if _, died := survive(func() error { _, err := e.Run(t.Context(), rel, nil); return err }); !died {
		t.Fatal("the upgrade never reached the scheduler's write")
	}
	n.crash(false)
	img := rel.Images[nodestate.Scheduler]
	if err := f.ImageService.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: img}); err != nil {
		t.Fatal(err)
	}
	r := n.engine(nil)
	r.images = e.images
	n.events = nil
	if res, err := r.Resume(t.Context()); err != nil || res.Outcome != Committed {
		t.Fatalf("Resume: %+v %v", res, err)
	}
	pulled := firstIndex(n.events, "applying image-pulled "+nodestate.Scheduler+": image "+img+" pulled")
	stop := firstIndex(n.events, "applying stop "+nodestate.Scheduler+":")
	if pulled < 0 || stop < pulled {
		t.Fatalf("pulled again at event %d, stopped at %d:\n%s", pulled, stop, strings.Join(n.events, "\n"))
	}
}
