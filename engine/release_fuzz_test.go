package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// FuzzParseRelease: ParseRelease never panics, and a release it accepts
// applies to a valid node state without panicking. Seeds:
// testdata/fuzz/FuzzParseRelease and the repository's release files.
func FuzzParseRelease(f *testing.F) {
	files, _ := filepath.Glob("../testdata/releases/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	st, err := nodestate.Load("../testdata/states/default-vip.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRelease(b)
		if err != nil {
			return
		}
		if r == nil {
			t.Fatal("ParseRelease returned neither a release nor an error")
		}
		if to, err := r.Apply(st); err == nil {
			if err := to.Validate(); err != nil {
				t.Fatalf("Apply returned a state that does not validate: %v", err)
			}
		}
	})
}
