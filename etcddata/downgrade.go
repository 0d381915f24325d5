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
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrDowngradeRefused: etcd refused to downgrade its data to the target
// minor (its validate or enable answered an error), or the member already
// downgrades to another one.
var ErrDowngradeRefused = errors.New("etcd refused the downgrade")

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
// or enable refused, or a downgrade to another minor under way, wraps
// ErrDowngradeRefused; timeout bounds the wait for the storage version.
func Downgrade(ctx context.Context, cfg ClientConfig, target string, timeout time.Duration) (Downgraded, error) {
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
		return fail(fmt.Errorf("status: %w (etcd must run and answer to downgrade its data)", err))
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
		for _, a := range []clientv3.DowngradeAction{clientv3.DowngradeValidate, clientv3.DowngradeEnable} {
			actx, cancel := context.WithTimeout(ctx, dialTimeout)
			_, err := cli.Downgrade(actx, a, want.String())
			cancel()
			if err != nil {
				return fail(fmt.Errorf("%w: %s: %v", ErrDowngradeRefused, actionName(a), err))
			}
		}
		out.Enabled = true
		slog.Info("etcd downgrade enabled", "endpoint", cfg.Endpoint, "target", target)
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
			return fail(fmt.Errorf("waiting %s for the storage version to be %s: %w; last answer: %s", timeout, target, context.DeadlineExceeded, last))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CancelDowngrade cancels the downgrade the cluster of the member at cfg
// has enabled (etcdctl downgrade cancel): the cluster version goes back up
// to the lowest server version of its members.
func CancelDowngrade(ctx context.Context, cfg ClientConfig) error {
	cli, dialTimeout, err := cfg.dial(ctx)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", cfg.Endpoint, err)
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if _, err := cli.Downgrade(actx, clientv3.DowngradeCancel, ""); err != nil {
		return fmt.Errorf("etcd downgrade cancel through %s: %w", cfg.Endpoint, err)
	}
	return nil
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
