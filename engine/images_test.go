package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"

	"github.com/ciq/stratum-upgrade/cri"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// imageRuntime is k8s.io/cri-client's fake CRI server (a real gRPC
// server on a unix socket, images in memory) holding the images of every
// manifest on the node's disk, and an Images config that reaches it
// through the real client. The real-runtime cases (containerd, a
// registry) are e2e/registry_test.go's.
func (n *memNode) imageRuntime(e *Engine) *fake.RemoteRuntime {
	n.t.Helper()
	f := fake.NewFakeRemoteRuntime()
	f.ImageService.SetFakeImageSize(25e6)
	var present []string
	for _, comp := range manifest.NamesFor(n.st) {
		b, err := n.store.Read(comp)
		if err != nil {
			n.t.Fatal(err)
		}
		refs, err := podImages(b)
		if err != nil {
			n.t.Fatal(err)
		}
		present = append(present, refs...)
	}
	f.ImageService.SetFakeImages(present)
	sock := "unix://" + filepath.Join(n.t.TempDir(), "cri.sock")
	if err := f.Start(sock); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(f.Stop)
	e.images = Images{Connect: func() (ImageRuntime, error) {
		return cri.Dial(cri.Source{Endpoint: sock, From: "test"}, cri.DialTimeout)
	}}
	return f
}

// pulled is the images the fake runtime was asked to pull.
func pulledCount(f *fake.RemoteRuntime) int {
	n := 0
	for _, c := range f.ImageService.Called {
		if c == "PullImage" {
			n++
		}
	}
	return n
}

// firstIndex is the index of the first event with prefix, -1 if none.
func firstIndex(events []string, prefix string) int {
	return slices.IndexFunc(events, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// An upgrade whose new images are not on the node pulls every one of them
// before anything is written, a progress event per image; the old images,
// present, are only looked up.
func TestImagesPulledBeforeFirstWrite(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	f := n.imageRuntime(e)
	rel := release(n.st, false, "", standin.ModeHealthy)
	res, err := e.Run(t.Context(), rel, nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	if got := pulledCount(f); got != len(res.Changed) {
		t.Fatalf("%d pulls for %d changed components: %v", got, len(res.Changed), f.ImageService.Called)
	}
	write := firstIndex(n.events, "applying write ")
	for _, comp := range res.Changed {
		i := slices.IndexFunc(n.events, func(s string) bool {
			return strings.HasPrefix(s, "planned image-pulled "+comp+": image "+rel.Images[comp]+" pulled (25.0 MB in ")
		})
		if i < 0 || i > write {
			t.Errorf("%s: pulled at event %d, first write at %d; events:\n%s", comp, i, write, strings.Join(n.events, "\n"))
		}
		old := n.st.Images[comp]
		if !slices.ContainsFunc(n.events, func(s string) bool {
			return s == fmt.Sprintf("planned image %s: image %s present (25.0 MB) for the rollback of %s", comp, old, comp)
		}) {
			t.Errorf("%s: no event for its present rollback image %s", comp, old)
		}
	}
}

// A pull that fails refuses the transaction in pre-flight: check
// ImagePull, the image and the runtime's reason named, nothing written or
// journaled. --ignore-preflight-errors=ImagePull lets it through, and the
// journal records that.
func TestImagePullFailureRefuses(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	f := n.imageRuntime(e)
	rel := release(n.st, false, "", standin.ModeHealthy)
	why := "failed to resolve reference: 127.0.0.1:5000/kube-scheduler:v1.34.5: not found"
	f.ImageService.InjectError("PullImage", status.Error(codes.NotFound, why))
	before := n.manifests()
	_, err := e.Run(t.Context(), rel, nil)
	var pe *PreflightError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0].Check != CheckImagePull {
		t.Fatalf("Run with a failing pull: %v; want one ImagePull pre-flight failure", err)
	}
	img := rel.Images[pe.Failed[0].Component]
	if !strings.Contains(err.Error(), img) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("refusal %q: want the image %s and the runtime's reason %q", err, img, why)
	}
	if hist, err := n.j.History(0); err != nil || len(hist) != 0 {
		t.Fatalf("journal after a refusal: %d transactions, %v", len(hist), err)
	}
	if after := n.manifests(); !mapsEqualBytes(before, after) {
		t.Fatal("the manifest directory changed after a pre-flight refusal")
	}

	f.ImageService.InjectError("PullImage", status.Error(codes.NotFound, why))
	res, err := e.RunWith(t.Context(), rel, nil, UpgradeOptions{IgnorePreflight: []string{CheckImagePull}})
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run with ImagePull ignored: %+v %v", res, err)
	}
	txn, err := n.j.Txn(res.Txn)
	if err != nil {
		t.Fatal(err)
	}
	if len(txn.IgnoredChecks) != 1 || txn.IgnoredChecks[0].Check != CheckImagePull {
		t.Fatalf("journaled ignored checks %+v, want the ImagePull finding", txn.IgnoredChecks)
	}
}

// No runtime: the engine says so once and goes on as before; with
// Require it refuses, nothing written.
func TestImagesNoRuntime(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	var logged strings.Builder
	// Said at debug: the CLI tells the operator, once and short.
	e.log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dials := 0
	e.images = Images{Connect: func() (ImageRuntime, error) {
		dials++
		return nil, &cri.NoRuntimeError{Tried: []string{"unix:///run/containerd/containerd.sock: no such file"}}
	}, Require: true}
	rel := release(n.st, false, "", standin.ModeHealthy)
	before := n.manifests()
	if _, err := e.Run(t.Context(), rel, nil); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "containerd.sock") {
		t.Fatalf("Run requiring a runtime with none: %v, want ErrNoRuntime naming the socket", err)
	}
	if hist, _ := n.j.History(0); len(hist) != 0 || !mapsEqualBytes(before, n.manifests()) {
		t.Fatal("a refusal for no runtime wrote something")
	}
	e.images.Require = false
	res, err := e.Run(t.Context(), rel, nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run without a runtime: %+v %v", res, err)
	}
	if _, err := e.RollbackLast(t.Context()); err != nil {
		t.Fatalf("rollback --last without a runtime: %v", err)
	}
	if got := strings.Count(logged.String(), `level=DEBUG msg="no container runtime answers`); got != 1 || dials != 3 {
		t.Fatalf("said %d times in %d transactions (%d dials), want once:\n%s", got, 2, dials, logged.String())
	}
}

// rollback --last pulls the images it goes back to before it stops
// anything, when they left the node after the upgrade.
func TestRollbackLastPullsOldImages(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	f := n.imageRuntime(e)
	old := n.st.Images
	res, err := e.Run(t.Context(), release(n.st, false, "", standin.ModeHealthy), nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	for _, comp := range res.Changed {
		if err := f.ImageService.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: old[comp]}); err != nil {
			t.Fatal(err)
		}
	}
	n.events = nil
	res, err = e.RollbackLast(t.Context())
	if err != nil || res.Outcome != Committed {
		t.Fatalf("rollback --last: %+v %v", res, err)
	}
	write := firstIndex(n.events, "applying write ")
	for _, comp := range res.Changed {
		i := firstIndex(n.events, "planned image-pulled "+comp+": image "+old[comp]+" pulled")
		if i < 0 || i > write {
			t.Errorf("%s: old image pulled at event %d, first write at %d:\n%s", comp, i, write, strings.Join(n.events, "\n"))
		}
	}
}

func TestPlanImages(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	rel := release(n.st, true, "", standin.ModeHealthy)
	rel.Images[nodestate.Scheduler] = n.st.Images[nodestate.Scheduler]
	p, err := e.Plan(rel)
	if err != nil {
		t.Fatal(err)
	}
	got, err := PlanImages(p)
	if err != nil {
		t.Fatal(err)
	}
	var want []NeededImage
	for _, comp := range p.Changed() {
		want = append(want, NeededImage{Ref: rel.Images[comp], Components: []string{comp}})
	}
	for _, comp := range p.Changed() {
		want = append(want, NeededImage{Ref: n.st.Images[comp], Components: []string{comp}, Rollback: true})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("PlanImages\n got %v\nwant %v", got, want)
	}
	if slices.Contains(p.Changed(), nodestate.Scheduler) {
		t.Fatal("the scheduler, at the same image, changed")
	}
}

func mapsEqualBytes(a, b map[string][]byte) bool { return maps.EqualFunc(a, b, bytes.Equal) }

// slowRuntime has no image and pulls until its context ends, as a pull
// over a link too slow to finish would.
type slowRuntime struct{}

func (slowRuntime) Status(ctx context.Context, ref string) (cri.Image, error) {
	return cri.Image{Ref: ref}, nil
}

func (slowRuntime) Pull(ctx context.Context, ref string) (cri.Image, error) {
	<-ctx.Done()
	return cri.Image{Ref: ref}, &cri.PullError{Ref: ref, Endpoint: "unix:///slow.sock", Reason: ctx.Err().Error()}
}

// A pull that does not finish within PullTimeout is given up: an ImagePull
// refusal that says so, nothing written.
func TestImagePullTimeout(t *testing.T) {
	n := newMemNode(t)
	e := n.engine(nil)
	e.images = Images{Connect: func() (ImageRuntime, error) { return slowRuntime{}, nil }, PullTimeout: 200 * time.Millisecond}
	rel := release(n.st, false, "", standin.ModeHealthy)
	start := time.Now()
	_, err := e.Run(t.Context(), rel, nil)
	var pe *PreflightError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "gave up after 200ms, --image-pull-timeout") {
		t.Fatalf("Run with pulls that never finish: %v; want ImagePull refusals that say the pull timed out", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("gave up after %s", d)
	}
	if hist, _ := n.j.History(0); len(hist) != 0 {
		t.Fatal("a refused run journaled a transaction")
	}
}
