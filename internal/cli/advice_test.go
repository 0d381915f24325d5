package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/versions"
)

// Each typed error of the library gets the advice that names what to run.
func TestAdvice(t *testing.T) {
	cases := []struct {
		err  error
		want []string
	}{
		{fmt.Errorf("run: %w: transaction x (upgrade) is in phase applying", journal.ErrTxnOpen), []string{"`stratum-upgrade resume`", "`stratum-upgrade rollback`"}},
		{fmt.Errorf("%w: x: %w", engine.ErrInterrupted, engine.ErrStillOpen), []string{"`stratum-upgrade resume` continues it"}},
		{fmt.Errorf("%w: manifest m", engine.ErrUnrestorable), []string{"`stratum-upgrade render`"}},
		{fmt.Errorf("%w: slow", engine.ErrEtcdBackupTimeout), []string{"--etcd-backup-timeout"}},
		{&engine.UntrustedJournalError{Txn: "t", Field: "snapshotDir", Value: "/etc"}, []string{"`stratum-upgrade history`", "`stratum-upgrade init --state FILE`"}},
		{fmt.Errorf("open: %w", journal.ErrNeedsMigration), []string{"`stratum-upgrade resume`"}},
		{fmt.Errorf("status: %w", &journal.CorruptError{Path: "/var/lib/stratum/stratum.db", Err: errors.New("page 7 says it is page 9")}),
			[]string{"bug report", "wrote no manifest", "docs/operations.md"}},
		{&engine.PreflightError{Subject: "release v1.34.5", Failed: []versions.Finding{{Check: engine.CheckImagePull, Component: "kube-apiserver", Message: "image x: not found"}}},
			[]string{"`stratum-upgrade images pull --to RELEASE`", "--ignore-preflight-errors=ImagePull", "docs/operations.md"}},
		{fmt.Errorf("%w: none", engine.ErrNoRuntime), []string{"--cri-socket"}},
		{&engine.RollbackFailedError{Txn: "t", Reason: "r"}, []string{"`stratum-upgrade status`", "`stratum-upgrade render`"}},
		{&engine.RollbackFailedError{Txn: "t", Reason: "r", EtcdDataDir: "/var/lib/etcd", EtcdAside: "/var/lib/etcd.stratum-pre-rollback-t"},
			[]string{"/var/lib/etcd.stratum-pre-rollback-t", "BEFORE running `stratum-upgrade render`"}},
	}
	for _, c := range cases {
		got := withAdvice(c.err)
		if !strings.HasPrefix(got, c.err.Error()) {
			t.Errorf("%v: the advice replaced the error: %q", c.err, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: advice %q does not say %q", c.err, got, w)
			}
		}
	}
	if a := (&globals{}).advice(errors.New("plain")); a != "" {
		t.Errorf("advice for an untyped error: %q", a)
	}
}

// A suggested command carries --state-dir and --manifest-dir when they are
// not the defaults, quoted for a shell when they need it.
func TestAdviceCarriesDirs(t *testing.T) {
	g := &globals{stateDir: "/srv/stratum state", manifestDir: "/srv/manifests"}
	got := g.withAdvice(fmt.Errorf("run: %w", journal.ErrTxnOpen))
	for _, w := range []string{
		"`stratum-upgrade resume --state-dir '/srv/stratum state' --manifest-dir /srv/manifests`",
		"`stratum-upgrade rollback --state-dir '/srv/stratum state' --manifest-dir /srv/manifests`",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("advice %q does not say %q", got, w)
		}
	}
	g = &globals{stateDir: DefaultStateDir, manifestDir: "/etc/kubernetes/manifests"}
	if got, want := g.cmdline("status"), "stratum-upgrade status"; got != want {
		t.Errorf("cmdline with the defaults = %q, want %q", got, want)
	}
	if got, want := shellQuote("it's"), `'it'\''s'`; got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}

// TestPreflightFooter: "Each check says which release would be valid"
// follows a release's upgrade-path checks only: not etcd's health alone,
// not a node state's change.
func TestPreflightFooter(t *testing.T) {
	const footer = "Each check says which release would be valid"
	g := &globals{}
	for _, tc := range []struct {
		subject string
		checks  []string
		want    bool
	}{
		{"release v1.37.2", []string{versions.CheckEtcdMinorSkip, engine.CheckEtcdHealth}, true},
		{"release v1.37.2", []string{versions.CheckComponentSkew}, true},
		{"release v1.37.2", []string{engine.CheckEtcdHealth}, false},
		{"release v1.36.2", []string{versions.CheckKubernetesDowngrade}, false},
		{"node state v1.36.3", []string{versions.CheckComponentSkew}, false},
	} {
		pe := &engine.PreflightError{Subject: tc.subject}
		for _, c := range tc.checks {
			pe.Failed = append(pe.Failed, versions.Finding{Check: c, Message: "m"})
		}
		adv := g.preflightAdvice(pe)
		if strings.Contains(adv, footer) != tc.want || !strings.Contains(adv, "--ignore-preflight-errors") {
			t.Errorf("%s %v: advice %q; footer wanted: %v", tc.subject, tc.checks, adv, tc.want)
		}
	}
}
