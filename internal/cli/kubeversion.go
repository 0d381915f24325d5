package cli

// Upgrades by version: plan --to VERSION and run --to VERSION, and the
// advice for a release whose kubernetesVersion is not kube-apiserver's.

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// kubernetesVersionAdvice is what to do about a target whose
// kubernetesVersion kube-apiserver does not run at: name the image, or
// upgrade by version, which moves every component.
func (g *globals) kubernetesVersionAdvice(err error) string {
	var kve *resolve.KubernetesVersionError
	if !errors.As(err, &kve) {
		return ""
	}
	return fmt.Sprintf("; name kube-apiserver's image at %s (and that of each other component the node pins) in the file, or give the version kube-apiserver runs at; on an initialised node `%s` moves every component to %s",
		kve.KubernetesVersion, g.cmdline("run --to "+kve.KubernetesVersion), kve.KubernetesVersion)
}

// looksLikeVersion matches what was meant as a Kubernetes version.
var looksLikeVersion = regexp.MustCompile(`^v?[0-9]+\.[0-9]+`)

// byVersion reports whether --to's value is a Kubernetes version (v1.36.3)
// rather than a release file: a value that parses as one is a version,
// unless a file of that name exists: "v1.37.2-broken.yaml" parses too (a
// pre-release "broken.yaml" of v1.37.2), and the operator named the file.
func byVersion(to string) bool {
	if _, err := os.Stat(to); err == nil {
		return false
	}
	_, err := nodestate.ParseKubernetesVersion(to)
	return err == nil
}

// releaseForVersion is the release an upgrade of st to Kubernetes version
// to applies (engine.ReleaseForVersion) and the file the journal records
// for it. A version it cannot move the node to is refused (exit 1).
func releaseForVersion(st *nodestate.NodeState, to string) (*engine.Release, []byte, error) {
	rel, err := engine.ReleaseForVersion(st, to)
	if err != nil {
		return nil, nil, err
	}
	raw, err := rel.Marshal()
	if err != nil {
		return nil, nil, err
	}
	return rel, raw, nil
}

// toFlagHelp is --to's help for plan and run.
const toFlagHelp = "the Kubernetes version to upgrade to (v1.36.3: every Kubernetes component to it, etcd to the version kubeadm pairs with its minor), or a release file (YAML, kind Release) pinning the images it names"

// warnUnknownPatch warns, on stderr, when cmd's --to is a version of a
// minor the table of versions/kubeadm knows but not one of its known patch
// releases (v1.35.99): its images may not exist, and images list would
// list them all the same. A patch newer than the table may be real, so it
// is a warning, not a refusal; the image pre-flight of run catches an
// image that cannot be pulled.
func (g *globals) warnUnknownPatch(cmd *cobra.Command) {
	f := cmd.Flags().Lookup("to")
	if f == nil || !byVersion(f.Value.String()) {
		return
	}
	v, err := nodestate.ParseKubernetesVersion(f.Value.String())
	if err != nil {
		return
	}
	m, ok := resolve.LookupMinor(v)
	if !ok || slices.Contains(m.Patches, f.Value.String()) {
		return
	}
	fmt.Fprintf(g.stderr, "stratum-upgrade: warning: %s is not a known release of Kubernetes %s (known: %s, per %s): check that it exists before relying on its images\n",
		f.Value.String(), m.Minor, strings.Join(m.Patches, ", "), resolve.PatchesSource())
}
