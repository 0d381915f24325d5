package cli

// The images a node needs and the container runtime they are pulled
// through: `images list|pull`, the runtime flags of the commands that
// begin a transaction, and plan's account of which images are present.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/cri"
	"github.com/ciq/stratum-upgrade/engine"
)

// criOptions are the container-runtime flags.
type criOptions struct {
	socket      string
	require     bool
	pullTimeout time.Duration
}

// criFlags adds --cri-socket to cmd and, when pulls, --image-pull-timeout;
// with require also --require-cri.
func (g *globals) criFlags(cmd *cobra.Command, pulls, require bool) {
	cmd.Flags().StringVar(&g.cri.socket, "cri-socket", "", "the container runtime's CRI socket (default: the running kubelet's, else containerRuntimeEndpoint in "+cri.KubeletConfig+", else containerd's, then CRI-O's default socket)")
	if pulls {
		cmd.Flags().DurationVar(&g.cri.pullTimeout, "image-pull-timeout", engine.DefaultPullTimeout, "how long one image pull through the container runtime may take")
	}
	if require {
		cmd.Flags().BoolVar(&g.cri.require, "require-cri", false, "refuse when no container runtime answers, instead of going on without the image pre-flight")
	}
}

// runtime connects to the container runtime the flags name.
func (g *globals) runtime() (*cri.Client, error) {
	return cri.Open(g.cri.socket, g.scanner, cri.KubeletConfig)
}

// noRuntime says once per command, in one short line, that no container
// runtime answers and which flags name one or require it; where it looked
// (every socket tried, a line of 400 characters) is at --log-level debug.
func (g *globals) noRuntime(err error) {
	g.noRuntimeOnce.Do(func() {
		g.log.Debug("no container runtime answers", "err", err)
		fmt.Fprintln(g.stderr, "stratum-upgrade: warning: no container runtime answers: the images are not checked (--cri-socket names its socket, --require-cri refuses without one; --log-level debug says where it looked)")
	})
}

// engineImages is the engine's image pre-flight configuration.
func (g *globals) engineImages() engine.Images {
	return engine.Images{
		Connect: func() (engine.ImageRuntime, error) {
			c, err := g.runtime()
			if err != nil {
				if !g.cri.require {
					g.noRuntime(err)
				}
				return nil, err
			}
			g.log.Info("container runtime for the image pre-flight", "endpoint", c.Source.Endpoint, "from", c.Source.From)
			return c, nil
		},
		Require:     g.cri.require,
		PullTimeout: g.cri.pullTimeout,
	}
}

func newImagesCmd(g *globals) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "images (list | pull) --to VERSION|RELEASE",
		Short: "List, or pull through the container runtime, every image the node runs at a version or release",
		Long: `images list prints every image the node runs once upgraded to VERSION (as
'run --to VERSION' moves it) or RELEASE (a release file): the image of each
component's manifest as the persisted node state with the target renders it, one per line in roster order (with --output json, one
object with the images and the components that run each). images pull pulls
each one that is not present through the container runtime (the one kubelet
uses, or --cri-socket), with a line per image; any image that cannot be pulled
is named with the runtime's reason and the exit code is 1.

run pulls what it needs before it stops anything; images pull does it ahead
of time, and images list is the list to mirror into a registry an air-gapped
node can reach (docs/operations.md, "Images").`,
		ValidArgs: []string{"list", "pull"},
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return cmdLineErrorf("images: say what to do: `images list --to VERSION` prints the images of a version, `images pull --to VERSION` pulls them")
			case len(args) != 1 || (args[0] != "list" && args[0] != "pull"):
				return cmdLineErrorf("images takes list or pull (got %q)", strings.Join(args, " "))
			}
			return nil
		},
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return cmdLineErrorf("images %s: --to VERSION|RELEASE is required: the Kubernetes version or the release file", args[0])
			}
			need, version, err := g.targetImages(to)
			if err != nil {
				return err
			}
			if args[0] == "list" {
				return g.listImages(version, need)
			}
			return g.pullImages(version, need)
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", toFlagHelp)
	g.criFlags(cmd, true, false) // images pull always needs a runtime
	return cmd
}

// targetImages is every image of the node at to, a Kubernetes version
// (as run --to VERSION moves the node: releaseForVersion) or a release
// file, and the target's Kubernetes version.
func (g *globals) targetImages(to string) ([]engine.NeededImage, string, error) {
	var rel *engine.Release
	if !byVersion(to) {
		r, _, err := loadRelease(to)
		if err != nil {
			return nil, "", err
		}
		rel = r
	}
	j, err := g.openJournal(true)
	if err != nil {
		return nil, "", err
	}
	defer j.Close()
	st, err := nodeState(j)
	if err != nil {
		return nil, "", err
	}
	if rel == nil {
		if rel, _, err = releaseForVersion(st, to); err != nil {
			return nil, "", err
		}
	}
	target, err := rel.Apply(st)
	if err != nil {
		return nil, "", usagef("release %s: %w", to, err)
	}
	need, err := engine.TargetImages(target)
	return need, rel.KubernetesVersion, err
}

// imagesReport is images' JSON output.
type imagesReport struct {
	To     string        `json:"to"`
	Images []imageReport `json:"images"`
}

type imageReport struct {
	Image      string   `json:"image"`
	Components []string `json:"components"`
	// Present, Pulled, Size and Error are pull's (null for list): the
	// image was there already, or was pulled; its size in bytes; why it
	// is not on the node.
	Present *bool   `json:"present"`
	Pulled  *bool   `json:"pulled"`
	Size    *uint64 `json:"size"`
	Error   *string `json:"error"`
}

func (g *globals) listImages(version string, need []engine.NeededImage) error {
	if g.json() {
		rep := imagesReport{To: version, Images: []imageReport{}}
		for _, n := range need {
			rep.Images = append(rep.Images, imageReport{Image: n.Ref, Components: n.Components})
		}
		return g.write(rep)
	}
	for _, n := range need {
		fmt.Fprintln(g.stdout, n.Ref)
	}
	return nil
}

// errImagesNotPulled is the error of an images pull that left an image
// off the node.
var errImagesNotPulled = errors.New("not every image could be pulled")

func (g *globals) pullImages(version string, need []engine.NeededImage) error {
	rt, err := g.runtime()
	if err != nil {
		return fmt.Errorf("images pull: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	rep := imagesReport{To: version, Images: []imageReport{}}
	var failed []string
	for _, n := range need {
		present, pulled := false, false
		r := imageReport{Image: n.Ref, Components: n.Components, Present: &present, Pulled: &pulled}
		img, err := rt.Status(ctx, n.Ref)
		switch {
		case err == nil && img.Present:
			present, r.Size = true, &img.Size
			g.textf("%s present (%s)\n", n.Ref, sizeText(img.Size))
		case err == nil:
			start := time.Now()
			pctx, cancel := context.WithTimeout(ctx, g.cri.pullTimeout)
			img, err = rt.Pull(pctx, n.Ref)
			cancel()
			if err == nil {
				pulled, r.Size = true, &img.Size
				g.textf("%s pulled (%s in %s)\n", n.Ref, sizeText(img.Size), time.Since(start).Round(time.Millisecond))
			}
		}
		if err != nil {
			r.Error = optional(err.Error())
			failed = append(failed, err.Error())
			g.textf("%s NOT PULLED: %v\n", n.Ref, err)
		}
		rep.Images = append(rep.Images, r)
	}
	if g.json() {
		if err := g.write(rep); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w through %s: %s", errImagesNotPulled, rt.Source, strings.Join(failed, "; "))
	}
	return nil
}

// textf prints a text-output line; nothing with --output json.
func (g *globals) textf(format string, a ...any) {
	if !g.json() {
		fmt.Fprintf(g.stdout, format, a...)
	}
}

// sizeText is a size in bytes for a line of text.
func sizeText(b uint64) string {
	if b == 0 {
		return "size unknown"
	}
	return fmt.Sprintf("%.1f MB", float64(b)/1e6)
}

// planImage is one image of plan's JSON output.
type planImage struct {
	engine.NeededImage
	Present bool `json:"present"`
	// Size is in bytes, 0 when not present or unknown.
	Size uint64 `json:"size"`
}

// planImages looks up in the runtime every image the plan needs: nil
// (and a warning) when no runtime answers.
func (g *globals) planImages(plan *engine.Plan) ([]planImage, error) {
	need, err := engine.PlanImages(plan)
	if err != nil || len(need) == 0 {
		return nil, err
	}
	rt, err := g.runtime()
	if err != nil {
		g.noRuntime(err)
		return nil, nil
	}
	out := make([]planImage, 0, len(need))
	for _, n := range need {
		img, err := rt.Status(context.Background(), n.Ref)
		if err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		out = append(out, planImage{NeededImage: n, Present: img.Present, Size: img.Size})
	}
	return out, nil
}

// planImageLines are plan's text lines for the images.
func planImageLines(imgs []planImage) []string {
	var out []string
	for _, i := range imgs {
		what := "for " + strings.Join(i.Components, ", ")
		if i.Rollback {
			what = "for the rollback of " + strings.Join(i.Components, ", ")
		}
		state := "would be pulled before anything stops"
		if i.Present {
			state = "present (" + sizeText(i.Size) + ")"
		}
		out = append(out, fmt.Sprintf("image %s %s: %s", i.Ref, what, state))
	}
	return out
}
