package cli

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/cri"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// advice is what the operator should do about err, as the CLI says it:
// the library returns typed errors that state what is wrong, and the
// commands to run next are the CLI's to name, each made by g.cmdline so
// that it carries the --state-dir and --manifest-dir in use. It is
// appended to the error where the error is printed; "" when there is
// nothing to add.
func (g *globals) advice(err error) string {
	var rf *engine.RollbackFailedError
	var nj *noJournalError
	var md *manifestDirError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &nj):
		return g.noJournalAdvice(nj)
	case errors.As(err, &md):
		return fmt.Sprintf(". Run it with --manifest-dir %s; or, if kubelet's staticPodPath moved to %s, move the node there with `%s` (the old directory is left as it is)",
			shellQuote(md.recorded), md.given, g.cmdline("init --force --state FILE"))
	case errors.As(err, new(*resolve.KubernetesVersionError)):
		return g.kubernetesVersionAdvice(err)
	case errors.As(err, &rf):
		adv := fmt.Sprintf(". The node state in the journal is still the one from before this transaction; `%s` shows each component. Fix the cause, then run `%s` to put every manifest back from it.", g.cmdline("status"), g.cmdline("render"))
		if rf.EtcdAside != "" {
			adv = fmt.Sprintf(". etcd's data dir %s is missing and its data is at %s: move it back (or finish the restore from %s) BEFORE running `%s`, or etcd starts as a new, empty cluster", rf.EtcdDataDir, rf.EtcdAside, rf.EtcdDataDir+".stratum-restore", g.cmdline("render")) + adv
		}
		return adv
	case errors.Is(err, engine.ErrUntrustedJournal):
		return fmt.Sprintf(". The journal was damaged or edited; see it with `%s`. Do not edit it back by hand: restore the state directory's stratum.db from a backup, or move it aside and re-import the node state with `%s` (the history is then lost), then `%s`", g.cmdline("history"), g.cmdline("init --state FILE"), g.cmdline("render"))
	case errors.Is(err, engine.ErrStillOpen):
		return fmt.Sprintf("; once the cause is fixed, `%s` continues it", g.cmdline("resume"))
	case errors.Is(err, journal.ErrTxnOpen):
		return fmt.Sprintf("; run `%s` to finish it, or `%s` to undo it", g.cmdline("resume"), g.cmdline("rollback"))
	case errors.Is(err, journal.ErrNoState):
		return fmt.Sprintf(": run `%s` on this node first", g.cmdline("init --state FILE"))
	case errors.Is(err, journal.ErrEmpty):
		return g.emptyJournalAdvice()
	case errors.Is(err, journal.ErrCorrupt):
		return ". Keep a copy of the file for a bug report; this command wrote no manifest. The node runs what its manifests say: check them and `crictl ps`, then follow \"A damaged journal\" in docs/operations.md to move the journal aside and re-import the node state"
	case errors.Is(err, journal.ErrNeedsMigration):
		return fmt.Sprintf("; it was written by an older stratum-upgrade: `%s` (or any command that writes) migrates it in one atomic step, an open transaction included", g.cmdline("resume"))
	case errors.Is(err, journal.ErrLocked):
		return fmt.Sprintf("; wait for it, or see `%s`", g.cmdline("status"))
	case errors.Is(err, engine.ErrUnrestorable):
		return fmt.Sprintf("; run `%s` to rewrite it from the node state, then try again", g.cmdline("render"))
	case errors.Is(err, engine.ErrPreflight):
		return g.preflightAdvice(err)
	case errors.Is(err, engine.ErrNoRuntime), errors.Is(err, cri.ErrNoRuntime):
		return "; name the container runtime's socket with --cri-socket (kubelet's --container-runtime-endpoint)"
	case errors.Is(err, engine.ErrControlPlaneDown):
		return "; if that is what you want (a maintenance window), run it again with --allow-control-plane-down"
	case errors.Is(err, engine.ErrEtcdBackupTimeout):
		return "; a larger etcd needs a longer --etcd-backup-timeout"
	case errors.Is(err, cluster.ErrNodeAlive), errors.Is(err, cluster.ErrUnknownNode), errors.Is(err, cluster.ErrForgetSelf), errors.Is(err, cluster.ErrBusy):
		return g.forgetAdvice(err)
	}
	return ""
}

// withAdvice is err's message followed by its advice.
func (g *globals) withAdvice(err error) string {
	if err == nil {
		return ""
	}
	return err.Error() + g.advice(err)
}

// withAdvice is err's message followed by its advice, with suggested
// commands for the default directories. Deprecated: use g.withAdvice,
// which names the directories in use.
func withAdvice(err error) string { return (&globals{}).withAdvice(err) }

// preflightAdvice is what to do about a pre-flight refusal: upgrade through
// the release each check names, or let a check through; and the commands
// some checks call for, with the directories in use.
func (g *globals) preflightAdvice(err error) string {
	adv := "\nTo go ahead anyway, let a check through with --ignore-preflight-errors=NAME[,NAME...] (or all); the journal records it with the transaction"
	var pe *engine.PreflightError
	if !errors.As(err, &pe) {
		return adv
	}
	if !pe.Ignorable() {
		// A move outside what Kubernetes or etcd support: no flag lets it
		// through, and its message says the supported way.
		adv = ""
		if slices.ContainsFunc(pe.Failed, func(f versions.Finding) bool { return !f.Unsupported }) {
			adv = "\nThe checks that cannot be ignored refuse whatever is let through; the others can be let through with --ignore-preflight-errors=NAME[,NAME...] once those pass"
		}
	}
	var downgrade, health, image, other, path bool
	for _, f := range pe.Failed {
		switch f.Check {
		case versions.CheckKubernetesDowngrade, versions.CheckEtcdDowngrade:
			downgrade = true
		case engine.CheckEtcdHealth:
			health = true
		case engine.CheckImagePull:
			image = true
		case versions.CheckKubernetesMinorSkip, versions.CheckEtcdMinorSkip, versions.CheckEtcdMinimumPatch, versions.CheckUnsupportedVersion, versions.CheckComponentSkew:
			path = true
		}
		other = other || f.Check != engine.CheckImagePull
	}
	if image {
		img := "\nAn image that was not pulled: fix its reference, or let the container runtime pull it (its own registry configuration and credentials: docs/operations.md, \"Images\"), or put it on the node first (`" + g.cmdline("images pull --to RELEASE") + "`). --ignore-preflight-errors=ImagePull goes ahead and leaves the pull to kubelet, after the component stopped"
		if !other {
			return img
		}
		adv += img
	}
	// Only the upgrade-path checks of a release name a release that would
	// be valid; etcd's health, a downgrade or a node state's change do not.
	if path && strings.HasPrefix(pe.Subject, "release ") {
		adv = strings.TrimSpace("\nEach check says which release would be valid: upgrade through it first. " + strings.TrimPrefix(adv, "\n"))
		adv = "\n" + adv
	}
	if downgrade {
		adv += fmt.Sprintf("\nTo go back to the release before the last committed upgrade, run `%s`", g.cmdline("rollback --last"))
	}
	if health {
		adv += fmt.Sprintf("\n`%s` shows etcd's processes and whether it answers", g.cmdline("status"))
	}
	return adv
}

// emptyJournalAdvice is what to do about a 0-byte journal: no command
// initialises it (it would forget the node), so it is restored or, without
// a backup, moved aside and the node state imported again.
func (g *globals) emptyJournalAdvice() string {
	adv := fmt.Sprintf(". This command wrote no manifest. Restore the state directory's %s from a backup; without one, follow \"A damaged journal\" in docs/operations.md: keep the file, move it aside, and import the node state again with `%s`", JournalFile, g.cmdline("init --state FILE"))
	if ents, err := os.ReadDir(g.snapshotRoot()); err == nil && len(ents) > 0 {
		adv += fmt.Sprintf(" (%s holds %d snapshot files: this node had a journal, and `%s` shows what it runs)", g.snapshotRoot(), len(ents), g.cmdline("audit"))
	}
	return adv
}
