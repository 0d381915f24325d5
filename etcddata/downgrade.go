// Moving a member's data back a minor with etcd's own downgrade protocol
// (3.6+): validate, enable, wait until the storage version is the target.

package etcddata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-semver/semver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrDowngradeRefused: etcd itself refused to downgrade its data to the
// target minor (validate or enable answered one of etcd's refusals, see
// refusal), or the member already downgrades to another one. Asking again
// gets the same answer.
var ErrDowngradeRefused = errors.New("etcd refused the downgrade")

// ErrDowngradeUnanswered: the downgrade got no answer that decides it (a
// timeout, no leader, etcd unreachable, its cluster version not yet set,
// or the storage version not moved in time). It is never a refusal:
// asking again later may succeed.
var ErrDowngradeUnanswered = errors.New("etcd's downgrade got no answer yet")

// Downgraded is what a downgrade left: the storage version etcd reports
// and its revision then (or, after a failure, the last one read; 0 when
// none was).
type Downgraded struct {
	StorageVersion string
	Revision       int64
	// Enabled says that this call enabled the downgrade (validate and
	// enable ran), rather than finding it enabled already.
	Enabled bool
}

// Downgrade moves the cluster of the member at cfg to minor target ("3.5")
// with etcd's downgrade protocol, and waits until the member's storage
// version is target: then an etcd of minor target starts on its data with
// every write kept. etcdutl's offline migrate cannot do it once the cluster
// version moved (the WAL replays the newer cluster version, and the older
// etcd refuses it: "invalid downgrade; server version is lower than
// determined cluster version"); the online protocol sets the cluster
// version back through raft and snapshots.
//
// It is resumable: a member whose storage version is target already is
// done, one already downgrading to target is only waited for. Validate
// or enable refused by etcd, or a downgrade to another minor under way,
// wraps ErrDowngradeRefused; every other failure (no answer, the wait for
// the storage version, bounded by timeout, ran out) wraps
// ErrDowngradeUnanswered.
//
// enabling, when set, is called with false right before validate and
// enable are sent (its error stops the downgrade there) and with true once
// enable succeeded: the caller journals that it enables the downgrade
// before etcd may have.
func Downgrade(ctx context.Context, cfg ClientConfig, target string, timeout time.Duration, enabling func(sent bool) error) (Downgraded, error) {
	var out Downgraded
	fail := func(err error) (Downgraded, error) {
		return out, fmt.Errorf("etcd downgrade of %s to %s: %w", cfg.Endpoint, target, err)
	}
	want, err := semver.NewVersion(target + ".0")
	if err != nil {
		return fail(fmt.Errorf("%w: target %q is not a minor version (3.6)", ErrInvalid, target))
	}
	cli, dialTimeout, err := cfg.dial(ctx)
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	status := func() (*clientv3.StatusResponse, error) {
		sctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		st, err := cli.Status(sctx, cfg.Endpoint)
		if err == nil {
			out.StorageVersion, out.Revision = st.StorageVersion, st.Header.Revision
		}
		return st, err
	}
	st, err := status()
	if err != nil {
		return fail(fmt.Errorf("%w: status: %w (etcd must run and answer to downgrade its data)", ErrDowngradeUnanswered, err))
	}
	if sameMinor(st.StorageVersion, want) {
		return out, nil
	}
	switch d := st.DowngradeInfo; {
	case d != nil && d.Enabled && !sameMinor(d.TargetVersion, want):
		return fail(fmt.Errorf("%w: the cluster downgrades to %s already (etcdctl downgrade cancel stops it)", ErrDowngradeRefused, d.TargetVersion))
	case d != nil && d.Enabled:
		// Enabled by an earlier run: wait for it.
	default:
		if enabling != nil {
			if err := enabling(false); err != nil {
				return fail(err)
			}
		}
		for _, a := range []clientv3.DowngradeAction{clientv3.DowngradeValidate, clientv3.DowngradeEnable} {
			actx, cancel := context.WithTimeout(ctx, dialTimeout)
			_, err := cli.Downgrade(actx, a, want.String())
			cancel()
			if err != nil {
				return fail(fmt.Errorf("%w: %s: %w", downgradeAnswer(err), actionName(a), err))
			}
		}
		out.Enabled = true
		slog.Info("etcd downgrade enabled", "endpoint", cfg.Endpoint, "target", target)
		if enabling != nil {
			if err := enabling(true); err != nil {
				return fail(err)
			}
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		st, err = status()
		if err == nil && sameMinor(st.StorageVersion, want) {
			slog.Info("etcd storage version downgraded", "endpoint", cfg.Endpoint, "storageVersion", st.StorageVersion, "revision", st.Header.Revision)
			return out, nil
		}
		if time.Now().After(deadline) {
			last := fmt.Sprintf("storage version %s", out.StorageVersion)
			if err != nil {
				last = err.Error()
			}
			return fail(fmt.Errorf("%w: waiting %s for the storage version to be %s: %w; last answer: %s", ErrDowngradeUnanswered, timeout, target, context.DeadlineExceeded, last))
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("%w: %w", ErrDowngradeUnanswered, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ErrDowngradeStillEnabled: a cancel was sent, yet etcd still reports the
// downgrade enabled (etcd 3.6 logs and swallows a cancel that fails).
var ErrDowngradeStillEnabled = errors.New("etcd's downgrade is still enabled")

// CancelDowngrade cancels the downgrade to minor target ("3.5") that the
// cluster of the member at cfg has enabled (etcdctl downgrade cancel): the
// cluster version goes back up to the lowest server version of its
// members. It reads the member's status back and returns nil only when no
// downgrade is enabled any longer; ErrDowngradeStillEnabled when one still
// is. A downgrade to another minor (not this caller's) is left alone and
// reported as still enabled. None enabled is nil.
func CancelDowngrade(ctx context.Context, cfg ClientConfig, target string) error {
	cli, dialTimeout, err := cfg.dial(ctx)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", cfg.Endpoint, err)
	}
	defer cli.Close()
	enabled := func() (string, error) {
		sctx, cancel := context.WithTimeout(ctx, dialTimeout)
		defer cancel()
		st, err := cli.Status(sctx, cfg.Endpoint)
		if err != nil {
			return "", fmt.Errorf("etcd status of %s (whether its downgrade is enabled is unknown): %w", cfg.Endpoint, err)
		}
		if d := st.DowngradeInfo; d != nil && d.Enabled {
			return d.TargetVersion, nil
		}
		return "", nil
	}
	on, err := enabled()
	if err != nil || on == "" {
		return err
	}
	if want, werr := semver.NewVersion(target + ".0"); werr == nil && !sameMinor(on, want) {
		return fmt.Errorf("%w: etcd downgrades to %s, not to %s: left as it is", ErrDowngradeStillEnabled, on, target)
	}
	actx, cancel := context.WithTimeout(ctx, dialTimeout)
	_, cerr := cli.Downgrade(actx, clientv3.DowngradeCancel, "")
	cancel()
	if cerr != nil && errors.Is(rpctypes.Error(cerr), rpctypes.ErrNoInflightDowngrade) {
		cerr = nil
	}
	on, err = enabled()
	switch {
	case err != nil:
		return fmt.Errorf("etcd downgrade cancel through %s (answer: %v): %w", cfg.Endpoint, cerr, err)
	case on != "":
		return fmt.Errorf("%w: etcd downgrade cancel through %s (answer: %v): etcd still downgrades to %s", ErrDowngradeStillEnabled, cfg.Endpoint, cerr, on)
	}
	slog.Info("etcd downgrade cancelled", "endpoint", cfg.Endpoint, "target", target)
	return nil
}

// DowngradeEnabled is the target version of the downgrade the member at
// cfg reports enabled ("3.5.0"), "" when none is.
func DowngradeEnabled(ctx context.Context, cfg ClientConfig) (string, error) {
	cli, dialTimeout, err := cfg.dial(ctx)
	if err != nil {
		return "", fmt.Errorf("etcd %s: %w", cfg.Endpoint, err)
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	st, err := cli.Status(sctx, cfg.Endpoint)
	if err != nil {
		return "", fmt.Errorf("etcd status of %s: %w", cfg.Endpoint, err)
	}
	if d := st.DowngradeInfo; d != nil && d.Enabled {
		return d.TargetVersion, nil
	}
	return "", nil
}

// refusals are etcd's own answers that refuse a downgrade validate or
// enable (server/etcdserver/version/errors.go and etcdserver/errors of
// 3.5 and 3.6): a target that is not one minor below the cluster version
// or not a version at all, a downgrade under way already. Asking again
// gets the same answer. etcd's cluster version not yet set
// (ErrClusterVersionUnavailable, a member just started) is not one.
var refusals = []error{
	rpctypes.ErrInvalidDowngradeTargetVersion,
	rpctypes.ErrWrongDowngradeVersionFormat,
	rpctypes.ErrDowngradeInProcess,
}

// downgradeAnswer is ErrDowngradeRefused when err is one of etcd's refusals, or
// the RPC is one this etcd does not have (before 3.5); any other error
// (deadline, unavailable, leader lost or changed) is ErrDowngradeUnanswered.
func downgradeAnswer(err error) error {
	if status.Code(err) == codes.Unimplemented {
		return ErrDowngradeRefused
	}
	ee := rpctypes.Error(err)
	for _, r := range refusals {
		if errors.Is(err, r) || errors.Is(ee, r) {
			return ErrDowngradeRefused
		}
	}
	return ErrDowngradeUnanswered
}

// sameMinor reports whether version v ("3.5.0", "3.5") is minor want's.
func sameMinor(v string, want *semver.Version) bool {
	got, err := semver.NewVersion(v)
	if err != nil {
		if got, err = semver.NewVersion(v + ".0"); err != nil {
			return false
		}
	}
	return got.Major == want.Major && got.Minor == want.Minor
}

func actionName(a clientv3.DowngradeAction) string {
	if a == clientv3.DowngradeValidate {
		return "downgrade validate"
	}
	return "downgrade enable"
}

// Revision is the revision of the member at cfg, from its status.
func Revision(ctx context.Context, cfg ClientConfig) (int64, error) {
	cli, dialTimeout, err := cfg.dial(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd %s: %w", cfg.Endpoint, err)
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	st, err := cli.Status(sctx, cfg.Endpoint)
	if err != nil {
		return 0, fmt.Errorf("etcd status of %s: %w", cfg.Endpoint, err)
	}
	return st.Header.Revision, nil
}
