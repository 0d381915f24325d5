package engine

// The StaticPodKubelet pre-flight check: every manifest a transaction would
// write, read by the rules of the kubelet that runs it now and of the one
// that runs it after the upgrade.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckStaticPodKubelet is the pre-flight check that each rendered
// manifest is a pod both kubelets that read it run as written: the node's
// kubelet now (its version read from its Node through the API server),
// which reads each manifest as soon as it is written, still the old one
// during an upgrade; and the target version's, which the kubelet moves to
// after its control plane and which reads every manifest again. One they
// would refuse (a static pod referencing an API object, refused by 1.34's
// kubelets by default and by 1.37's always; a container's own
// restartPolicy, refused by 1.34's) never runs, and a field they would
// drop (unknown to them) is lost silently. When the node's kubelet cannot
// be read, the target's alone is checked, and the log says so.
//
// It also refuses a container that kubelet would not run with
// imagePullPolicy IfNotPresent (only a patch sets another), naming the
// patch file: kubelet would pull its image again after the stop, which
// the image checks before each stop cannot prevent.
const CheckStaticPodKubelet = "StaticPodKubelet"

// liveKubelet reads the version of the node's running kubelet
// (UpgradeOptions.Kubelet), logging why it could not (at info level: the
// check is then the target's alone, as before); a nil log is
// slog.Default(), and then no read at all is not logged.
type liveKubelet struct {
	read func(ctx context.Context) (string, error)
	log  *slog.Logger
}

// version is the node's running kubelet's version ("v1.34.4"), or "" when
// it is not known: no API server, one that does not answer or refuses, a
// Node with no version. Unknown is no refusal: the check then has the
// target's kubelet alone, as the log says.
func (k liveKubelet) version(ctx context.Context) string {
	log := k.log
	if log == nil {
		if k.read == nil {
			return "" // a plan with no API server to ask
		}
		log = slog.Default()
	}
	if k.read == nil {
		// As APIServerSkew without an API server: nothing to say by default.
		log.Debug("static pods checked against the target's kubelet alone: there is no API server to read this node's running kubelet from")
		return ""
	}
	v, err := k.read(ctx)
	if err == nil {
		if pv, perr := version.ParseGeneric(v); perr != nil || pv.Major() != 1 {
			err = fmt.Errorf("its Node says kubelet version %q, which is not one", v)
		}
	}
	if err != nil {
		// Info, not a warning: the check is today's (the target's kubelet),
		// and a node whose API server is not one (the demo's stand-in) would
		// warn on every command.
		log.Info("static pods checked against the target's kubelet alone: this node's running kubelet's version cannot be read from the API server", "err", err)
		return ""
	}
	return v
}

// staticPodFindings are the CheckStaticPodKubelet failures of plan's
// manifests, read by the rules of the node's running kubelet, live ("":
// not known), and of the target's kubelet, target (its Kubernetes
// version), in roster order. A problem both kubelets have is one finding.
func staticPodFindings(plan *Plan, live, target string) []versions.Finding {
	if lv, err := version.ParseGeneric(live); err != nil {
		live = ""
	} else if tv, err := version.ParseGeneric(target); err == nil && versions.MinorOf(lv) == versions.MinorOf(tv) {
		live = "" // the same rules: the target's say it
	}
	var out []versions.Finding
	add := func(comp, msg string) {
		out = append(out, versions.Finding{Check: CheckStaticPodKubelet, Component: comp, Message: fmt.Sprintf("%s's rendered manifest: %s", comp, msg)})
	}
	for _, c := range plan.Changes {
		problems, err := kubeletpod.Check(c.After, target)
		if err != nil {
			out = append(out, versions.Finding{Check: CheckStaticPodKubelet, Component: c.Component,
				Message: fmt.Sprintf("%s's rendered manifest cannot be checked against kubelet %s's rules: %v", c.Component, target, err)})
			continue
		}
		if live != "" {
			problems = liveProblems(c.After, live, target, problems)
		}
		for _, p := range problems {
			add(c.Component, p.Message)
		}
		for _, p := range pullPolicies(plan.To, c) {
			add(c.Component, p.String())
		}
	}
	return out
}

// liveProblems are the problems of manifest b by the running kubelet live
// first, each saying that kubelet reads it as soon as it is written (and
// whether target's has it too), then those of target's alone (targets).
func liveProblems(b []byte, live, target string, targets []kubeletpod.Problem) []kubeletpod.Problem {
	lps, err := kubeletpod.Check(b, live)
	if err != nil {
		return targets // target's reading decoded it: live is a version (checked)
	}
	tminor := target
	if tv, err := version.ParseGeneric(target); err == nil {
		tminor = versions.MinorOf(tv)
	}
	var out []kubeletpod.Problem
	for _, p := range lps {
		too := ""
		if slices.ContainsFunc(targets, func(t kubeletpod.Problem) bool { return t.What == p.What && t.Refused == p.Refused }) {
			too = fmt.Sprintf("; kubelet %s, the target's, would too", tminor)
		}
		p.Message += fmt.Sprintf(" (this node runs kubelet %s now, which reads the manifest as soon as it is written%s)", live, too)
		out = append(out, p)
	}
	for _, t := range targets {
		if !slices.ContainsFunc(lps, func(p kubeletpod.Problem) bool { return t.What == p.What && t.Refused == p.Refused }) {
			out = append(out, t)
		}
	}
	return out
}

// pullPolicies is the containers of c's manifest that kubelet would not
// run with imagePullPolicy IfNotPresent, each with the patch file of to
// that set it when c's manifest is to's render (it is in a plan).
func pullPolicies(to *nodestate.NodeState, c Change) []manifest.PullPolicy {
	pod, err := manifest.DecodePod(c.After)
	if err != nil {
		return nil // kubeletpod.Check said so
	}
	bad := manifest.NotIfNotPresent(pod)
	if len(bad) == 0 || to == nil {
		return bad
	}
	if prof, err := manifest.LoadProfile(to); err == nil {
		if named, err := manifest.PullPolicies(to, prof, c.Component); err == nil && len(named) == len(bad) {
			return named
		}
	}
	return bad
}
