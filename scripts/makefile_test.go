package scripts

import (
	"os/exec"
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
