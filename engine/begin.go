package engine

// The way every new transaction begins (a run, an apply, a verb, a
// rollback --last): this node's topology read once from the live cluster,
// the plan, the refusal of an unknown topology, the rollout lock, the
// components that do not answer, the journal's begin and the cluster's,
// then the drive.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// beginning is what a new transaction begins with: its plan and what the
// journal records beside it.
type beginning struct {
	plan *Plan
	// release is the release file a run was given (journal.Txn.Release).
	release []byte
	// source is the retained snapshot a rollback --last puts back.
	source string
	// what is the begin event's account of the plan.
	what string
	// ignore names the image pre-flight findings let through; subject
	// names the transaction in a refusal ("release v1.37.2").
	ignore  []string
	subject string
}

// begin begins and drives a transaction of kind on the node of state st
// (the journal's node state), once prepare, given the node's topology,
// returned its beginning. A refusal of prepare comes first (nothing to do,
// a pre-flight check): an unknown topology prepares with the stricter
// single-member checks, then refuses, also in place of a refusal that
// rests on the member count (refusal).
func (e *Engine) begin(ctx context.Context, kind string, st *nodestate.NodeState, prepare func(topology) (*beginning, error)) (Result, error) {
	t, c, terr := e.topology(ctx, st, "")
	if c != nil {
		defer c.Close()
	}
	b, err := prepare(t)
	if err != nil {
		return Result{}, refusal(err, terr)
	}
	if terr != nil {
		return Result{}, terr
	}
	if err := e.imagePreflight(ctx, b); err != nil {
		return Result{}, err
	}
	p := b.plan
	from, err := p.From.Marshal()
	if err != nil {
		return Result{}, err
	}
	to, err := p.To.Marshal()
	if err != nil {
		return Result{}, err
	}
	return e.coordinated(ctx, t, c, p.From, p.To, kind, "", func() (Result, error) {
		// Asked once the rollout lock is held, right before Begin.
		if err := e.clusterSkew(ctx, b); err != nil {
			return Result{}, err
		}
		down := e.downBefore(ctx, p.From)
		txn, err := e.j.Begin(journal.Txn{Kind: kind, From: from, To: to, Release: b.release, Source: b.source, Changed: p.Changed(), Targets: p.Targets(), IgnoredChecks: ignoredChecks(p.Ignored), Down: down})
		if err != nil {
			return Result{}, err
		}
		if ok, err := e.recordBegin(ctx, &txn, p.To); err != nil {
			return Result{Txn: txn.ID}, err
		} else if !ok {
			return e.drive(ctx, &txn)
		}
		for _, f := range p.Ignored {
			e.event(txn.ID, journal.PhasePlanned, "preflight", f.Component, "", fmt.Sprintf("warning: pre-flight check %s failed and is ignored (--ignore-preflight-errors): %s", f.Check, f.Message))
		}
		e.event(txn.ID, journal.PhasePlanned, "begin", "", "", b.what)
		e.hit(fault.AfterBegin)
		return e.drive(ctx, &txn)
	})
}

// imagePreflight is the ImagePull check of b's plan, before the rollout
// lock and before anything is written: a refusal is a *PreflightError
// that also carries the checks the plan let through; the findings it lets
// through join b.plan.Ignored, to be journaled with the transaction.
func (e *Engine) imagePreflight(ctx context.Context, b *beginning) error {
	findings, err := e.ensureImages(ctx, b.plan)
	if err != nil {
		return err
	}
	ignored, err := preflight{ignore: b.ignore, subject: b.subject}.settle(findings)
	var pe *PreflightError
	if errors.As(err, &pe) {
		pe.Ignored = append(slices.Clone(b.plan.Ignored), pe.Ignored...)
		return pe
	}
	b.plan.Ignored = append(b.plan.Ignored, ignored...)
	return nil
}
