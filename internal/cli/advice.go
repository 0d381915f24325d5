package cli

import (
	"errors"
	"fmt"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
)

// advice is what the operator should do about err, as the CLI says it:
// the library returns typed errors that state what is wrong, and the
// commands to run next are the CLI's to name. It is appended to the error
// where the error is printed; "" when there is nothing to add.
func advice(err error) string {
	var rf *engine.RollbackFailedError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &rf):
		adv := ". The node state in the journal is still the one from before this transaction; `stratum-upgrade status` shows each component. Fix the cause, then run `stratum-upgrade render` to put every manifest back from it."
		if rf.EtcdAside != "" {
			adv = fmt.Sprintf(". etcd's data dir %s is missing and its data is at %s: move it back (or finish the restore from %s) BEFORE running `stratum-upgrade render`, or etcd starts as a new, empty cluster", rf.EtcdDataDir, rf.EtcdAside, rf.EtcdDataDir+".stratum-restore") + adv
		}
		return adv
	case errors.Is(err, engine.ErrUntrustedJournal):
		return ". The journal was damaged or edited; see it with `stratum-upgrade history`. Do not edit it back by hand: restore the state directory's stratum.db from a backup, or move it aside and re-import the node state with `stratum-upgrade init --state` (the history is then lost), then `stratum-upgrade render`"
	case errors.Is(err, engine.ErrStillOpen):
		return "; once the cause is fixed, `stratum-upgrade resume` continues it"
	case errors.Is(err, journal.ErrTxnOpen):
		return "; run `stratum-upgrade resume` to finish it, or `stratum-upgrade rollback` to undo it"
	case errors.Is(err, journal.ErrCorrupt):
		return ". Keep a copy of the file for a bug report; this command wrote no manifest. The node runs what its manifests say: check them and `crictl ps`, then follow \"A damaged journal\" in docs/operations.md to move the journal aside and re-import the node state"
	case errors.Is(err, journal.ErrNeedsMigration):
		return "; it was written by an older stratum-upgrade: `stratum-upgrade resume` (or any command that writes) migrates it in one atomic step, an open transaction included"
	case errors.Is(err, journal.ErrLocked):
		return "; wait for it, or see `stratum-upgrade status`"
	case errors.Is(err, engine.ErrUnrestorable):
		return "; run `stratum-upgrade render` to rewrite it from the node state, then try again"
	case errors.Is(err, engine.ErrPreflight):
		return "\nEach check says which release would be valid: upgrade through it first. To go ahead anyway, let a check through with --ignore-preflight-errors=NAME[,NAME...] (or all); the journal records it with the transaction"
	case errors.Is(err, engine.ErrEtcdBackupTimeout):
		return "; a larger etcd needs a longer --etcd-backup-timeout"
	}
	return ""
}

// withAdvice is err's message followed by its advice.
func withAdvice(err error) string {
	if err == nil {
		return ""
	}
	return err.Error() + advice(err)
}
