package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ciq/stratum-upgrade/journal"
)

func TestPrintHistoryCutsReasons(t *testing.T) {
	started := time.Date(2026, 12, 2, 13, 4, 5, 0, time.UTC)
	long := "kube-apiserver: did not answer https://127.0.0.1:6443/livez within 3m0s;\nthen the rollback failed: kube-apiserver: still down"
	txns := []txnInfo{
		{ID: "20261202T130405Z-1a2b", Kind: "upgrade", Phase: journal.PhaseRolledBack, Started: started, Duration: "1.5s",
			From: ptr("v1.34.4"), To: ptr("v1.34.5"), Written: []string{"kube-apiserver"}, Reason: ptr(long)},
		{ID: "20261202T120000Z-0000", Kind: "upgrade", Phase: journal.PhaseCommitted, Started: started, Duration: "20s",
			From: ptr("v1.34.3"), To: ptr("v1.34.4"), Written: []string{"etcd", "kube-apiserver"}},
	}
	whole := strings.Join(strings.Fields(long), " ")
	tests := []struct {
		name      string
		width     int
		want      []string // substrings of the output
		maxLine   int      // 0: no bound
		cutNotice bool
	}{
		{"no width: whole lines", 0, []string{whole, "etcd, kube-apiserver  -\n"}, 0, false},
		{"wide enough: whole lines", 400, []string{whole}, 0, false},
		{"cut to the width", 150, []string{"  kube-apiserver: did not answer h…\n"}, 150, true},
		{"narrow: 20 runes of the reason kept", 40, []string{"  kube-apiserver: did…\n"}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := printHistory(&b, txns, tc.width, "stratum-upgrade history TXN"); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "within 3m0s;\n") {
				t.Errorf("a reason's newline breaks its row:\n%s", out)
			}
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if tc.maxLine > 0 && utf8.RuneCountInString(line) > tc.maxLine && !strings.HasPrefix(line, "(reasons cut") {
					t.Errorf("line of %d runes, want at most %d: %q", utf8.RuneCountInString(line), tc.maxLine, line)
				}
			}
			if got := strings.Contains(out, "(reasons cut to the terminal's width: `stratum-upgrade history TXN` shows the whole)"); got != tc.cutNotice {
				t.Errorf("cut notice %v, want %v:\n%s", got, tc.cutNotice, out)
			}
		})
	}
}

func TestWritten(t *testing.T) {
	txn := &journal.Txn{Changed: []string{"etcd", "kube-apiserver", "kube-scheduler"}}
	recs := []journal.Record{
		{Phase: journal.PhaseApplying, Step: journal.StepMark, Component: "etcd"},
		{Phase: journal.PhaseApplying, Step: journal.StepDone, Component: "etcd"},
		{Phase: journal.PhaseApplying, Step: journal.StepMark, Component: "kube-apiserver"},
		// A rollback's marks are restarts, not the upgrade's writes.
		{Phase: journal.PhaseRollingBack, Step: journal.StepMark, Component: "kube-scheduler"},
	}
	if got := written(txn, recs); strings.Join(got, ",") != "etcd,kube-apiserver" {
		t.Errorf("written = %v, want [etcd kube-apiserver]", got)
	}
	if got := written(txn, nil); got == nil || len(got) != 0 {
		t.Errorf("written with no records = %#v, want []", got)
	}
}

func TestOutputRequested(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate", "-o", "json"}, "json"},
		{[]string{"--output=json", "frobnicate"}, "json"},
		{[]string{"status", "-ojson", "--bogus"}, "json"},
		{[]string{"status", "-o=json"}, "json"},
		{[]string{"status", "-o", "yaml", "--bogus"}, "yaml"},
		{[]string{"status", "--output", "text"}, "text"},
		{[]string{"status", "-o", "json", "-o", "text"}, "text"},
		{[]string{"status", "--", "-o", "json"}, "text"},
		{[]string{"status"}, "text"},
	}
	for _, tc := range tests {
		g := &globals{output: "text"}
		if got := outputRequested(g, tc.args); got != tc.want {
			t.Errorf("outputRequested(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
	if outputRequested(&globals{output: "json"}, nil) != "json" {
		t.Error("a parsed --output json is not seen")
	}
	if outputRequested(&globals{output: "yaml"}, []string{"-o", "json"}) != "yaml" {
		t.Error("a parsed --output yaml is not seen")
	}
}
