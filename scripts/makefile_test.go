package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makeN is what make -n TARGET would run in the repository root (the
// commands printed, none run but recursive makes).
func makeN(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("make", append([]string{"-C", "..", "-n"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestFiguresWriteDocsOnlyWhenAsked: make bench and make ha print their
// figures and pass no -doc to their figures tools, so a benchmark or a
// test run leaves docs/performance.md alone; bench-doc, ha-doc and DOC=1
// pass -doc docs/performance.md.
func TestFiguresWriteDocsOnlyWhenAsked(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make")
	}
	for _, target := range []string{"bench", "ha"} {
		if out := makeN(t, target); strings.Contains(out, "-doc") {
			t.Errorf("make %s would write the docs:\n%s", target, out)
		}
		for _, args := range [][]string{{target + "-doc"}, {target, "DOC=1"}} {
			if out := makeN(t, args...); !strings.Contains(out, "-doc docs/performance.md") {
				t.Errorf("make %s would not write docs/performance.md:\n%s", strings.Join(args, " "), out)
			}
		}
	}
}

// TestMakeTestKeepsGoTestsStatus: make test passes go test's output on
// whole, failures included, ends with the slowest packages' times, and
// fails when go test fails (the pipe into slowest must not hide it). A
// stand-in for go runs the tests; slowest is built by the real one.
func TestMakeTestKeepsGoTestsStatus(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs go")
	}
	fake := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\n" +
		"[ \"$1\" = test ] || exec " + goBin + " \"$@\"\n" +
		"case \"$*\" in *'-run ^$'*) exit 0;; esac\n" +
		"printf 'ok  \\texample.com/fast\\t1.5s\\n--- FAIL: TestX (0.00s)\\nFAIL\\texample.com/slow\\t30.0s\\n'\n" +
		"exit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-C", "..", "test", "GO="+fake, "STRATUM_SEED=1").CombinedOutput()
	if err == nil {
		t.Errorf("make test passed though go test failed:\n%s", out)
	}
	for _, want := range []string{"--- FAIL: TestX", "slowest packages:\n    30.0s  example.com/slow (FAIL)\n     1.5s  example.com/fast\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make test's output lacks %q:\n%s", want, out)
		}
	}
}
