package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestByVersionNamedFileWins: --to's value is a version when it parses as
// one, unless it names a file: a release file such as the demo's
// v1.37.2-broken.yaml parses as v1.37.2 with a pre-release "broken.yaml".
func TestByVersionNamedFileWins(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(filepath.Join(dir, "v1.37.2-broken.yaml"), []byte("kind: Release\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		to   string
		want bool
	}{
		{"v1.36.3", true},
		{"v1.37.2-broken.yaml", false},                     // the file exists
		{filepath.Join(dir, "v1.37.2-broken.yaml"), false}, // by path too
		{"v1.37.2-rc.1", true},                             // no such file: a version
		{"release.yaml", false},                            // neither: loadRelease says why
	} {
		if got := byVersion(c.to); got != c.want {
			t.Errorf("byVersion(%q) = %v, want %v", c.to, got, c.want)
		}
	}
}
