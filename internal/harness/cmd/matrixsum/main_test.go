package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestRunCountsLeavesPerMatrix(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Test":"TestCrashMatrix"}`,
		`{"Action":"pass","Test":"TestCrashMatrix/upgrade/a"}`,
		`{"Action":"fail","Test":"TestCrashMatrix/upgrade/b"}`,
		`{"Action":"fail","Test":"TestCrashMatrix/upgrade"}`,
		`{"Action":"fail","Test":"TestCrashMatrix"}`,
		`{"Action":"pass","Test":"TestRebootMatrix/x"}`,
		`{"Action":"pass","Test":"TestMemMatrix/default/upgrade/crash/p"}`,
		`{"Action":"skip","Test":"TestMemMatrix/default/upgrade/crash/q"}`,
		`{"Action":"pass","Test":"TestPowerLossMatrix/y"}`,
		`{"Action":"output","Test":"TestPowerLossMatrix/y","Output":"hello\n"}`,
		`{"Action":"pass","Test":"TestPowerCutAtEveryIO/upgrade/after-3"}`,
		`{"Action":"pass","Test":"TestIOErrorMatrix"}`,
	}, "\n")
	var out bytes.Buffer
	code := run(strings.NewReader(in), &out, io.Discard)
	want := "kill 1/2 reboot 1/1 kill+reboot(model) 1/1 (+1 skipped) power-loss 1/1 power-cut-io 1/1 io-errors 1/1 NOT converged\n"
	if out.String() != want || code != 1 {
		t.Fatalf("got %q exit %d, want %q exit 1", out.String(), code, want)
	}
	out.Reset()
	if code := run(strings.NewReader(`{"Action":"pass","Test":"TestCrashMatrix/a"}`), &out, io.Discard); code != 1 || !strings.Contains(out.String(), "reboot not-run") {
		t.Fatalf("a matrix that did not run: %q exit %d", out.String(), code)
	}
}
