package engine

// A downgrade of etcd that this transaction enabled always ends: etcd
// finishes it once the member's binary is swapped, or it is cancelled on
// every other path (docs/reliability.md, "etcd's downgrade: when it is
// enabled and how it always ends").

import (
	"context"
	"errors"
	"fmt"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// enablingHook is the callback etcd's Downgrade calls around its enable:
// before it is sent, it journals that this transaction enables the
// downgrade to target (StepEtcdDowngradeEnable "enabling"), so that a
// crash right after the enable still knows who enabled it; once etcd
// enabled it, the cluster's view of this node says so (status --cluster).
func (e *Engine) enablingHook(ctx context.Context, r *run, p journal.Phase, target string) func(sent bool) error {
	return func(sent bool) error {
		if sent {
			e.hit(fault.AfterEtcdDowngradeEnabled)
			if e.hold != nil {
				e.hold.MarkEtcdDowngrade(ctx, target)
			}
			return nil
		}
		rec := journal.Record{Phase: p, Step: journal.StepEtcdDowngradeEnable, Component: nodestate.Etcd, EtcdTarget: target, Why: journal.EtcdDowngradeEnabling}
		if err := e.append(r, p, rec); err != nil {
			return err
		}
		e.hit(fault.AfterEtcdDowngradeEnabling)
		return nil
	}
}

// enabledDowngrade is the minor of the downgrade this transaction enabled
// going forwards (or was about to: the enable may have reached etcd) and
// neither cancelled nor saw refused; "" when there is none. A rollback's
// own enable (the way back past a moved cluster version) is not one.
func (r *run) enabledDowngrade() string {
	target := ""
	for _, rec := range r.recs {
		if rec.Step != journal.StepEtcdDowngradeEnable {
			continue
		}
		switch {
		case rec.Why == journal.EtcdDowngradeEnabling && rec.Phase != journal.PhaseRollingBack:
			target = rec.EtcdTarget
		case rec.Why == journal.EtcdDowngradeCancelled || rec.Why == journal.EtcdDowngradeRefused:
			target = ""
		}
	}
	return target
}

// closeRefusedEnable journals that etcd refused the enable this
// transaction was about to send: it enabled none, and none is cancelled.
func (e *Engine) closeRefusedEnable(r *run, p journal.Phase, target string) error {
	if r.enabledDowngrade() != target {
		return nil
	}
	return e.append(r, p, journal.Record{Phase: p, Step: journal.StepEtcdDowngradeEnable, Component: nodestate.Etcd, EtcdTarget: target, Why: journal.EtcdDowngradeRefused})
}

// cancelEnabledDowngrade cancels the downgrade this transaction enabled
// (enabledDowngrade), through the member of st, reads it back and
// journals the cancel (p's phase). It returns "" when there was none, or
// what an operator reads about it, and an error when etcd still reports
// it enabled (or cannot say).
func (e *Engine) cancelEnabledDowngrade(ctx context.Context, r *run, p journal.Phase, st *nodestate.NodeState) (string, error) {
	target := r.enabledDowngrade()
	if target == "" {
		return "", nil
	}
	if err := e.etcd.CancelDowngrade(ctx, st, target); err != nil {
		msg := fmt.Sprintf("etcd's downgrade to %s, which this transaction enabled, may still be enabled: %v", target, err)
		e.event(r.txn.ID, p, "etcd-downgrade-cancel", nodestate.Etcd, "", msg)
		return msg, fmt.Errorf("%w: %v", errDowngradeEnabled, err)
	}
	e.hit(fault.AfterEtcdDowngradeCancel)
	msg := fmt.Sprintf("etcd's downgrade to %s, which this transaction enabled, was cancelled (read back)", target)
	e.event(r.txn.ID, p, "etcd-downgrade-cancel", nodestate.Etcd, "", msg)
	if e.hold != nil {
		e.hold.MarkEtcdDowngrade(ctx, "")
	}
	rec := journal.Record{Phase: p, Step: journal.StepEtcdDowngradeEnable, Component: nodestate.Etcd, EtcdTarget: target, Why: journal.EtcdDowngradeCancelled}
	return msg, e.append(r, p, rec)
}

// errDowngradeEnabled: a cancel of this transaction's downgrade did not
// take (etcd still reports it enabled, or did not answer).
var errDowngradeEnabled = errors.New("etcd's downgrade is still enabled")

// cancelDowngradeOnFail is gateBefore's guard: when its etcd step fails
// after etcd's downgrade was enabled (the leader move, say), the step
// does not go on to swap etcd's binary, so the downgrade this transaction
// enabled is cancelled now; the error says whether it was.
func (e *Engine) cancelDowngradeOnFail(ctx context.Context, r *run, p journal.Phase, err error) error {
	if err == nil || p == journal.PhaseRollingBack {
		return err
	}
	msg, cerr := e.cancelEnabledDowngrade(context.WithoutCancel(ctx), r, p, r.from)
	switch {
	case cerr != nil && !errors.Is(cerr, errDowngradeEnabled):
		return errors.Join(err, cerr)
	case msg != "":
		return fmt.Errorf("%w; %s", err, msg)
	}
	return err
}

// endEnabledDowngrade runs at the end of a rollback, once the old etcd
// runs again: a downgrade this transaction enabled going forwards is
// cancelled (a crash after the enable, a step that failed before or
// after etcd's swap). While etcd still reports it enabled the rollback
// pauses (errResumable: exit 6), and resume cancels again.
func (e *Engine) endEnabledDowngrade(ctx context.Context, r *run) error {
	_, err := e.cancelEnabledDowngrade(ctx, r, journal.PhaseRollingBack, r.from)
	if errors.Is(err, errDowngradeEnabled) {
		return fmt.Errorf("%w: %v: run `stratum-upgrade resume` once etcd answers (or cancel it with etcdctl downgrade cancel)", errResumable, err)
	}
	return err
}

// downgradeRefused reports whether err is etcd's own refusal of a
// downgrade, as opposed to no answer (etcddata.ErrDowngradeUnanswered).
func downgradeRefused(err error) bool {
	return errors.Is(err, etcddata.ErrDowngradeRefused)
}
