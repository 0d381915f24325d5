package etcdbuild

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBinaryBuildsOnceAndRuns(t *testing.T) {
	for _, b := range Builds {
		t.Run(b.Minor, func(t *testing.T) {
			path, err := Binary(b.Minor)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(path, "--version").Output()
			if err != nil {
				t.Fatal(err)
			}
			if want := "etcd Version: " + strings.TrimPrefix(b.ModuleVersion, "v"); !strings.Contains(string(out), want) {
				t.Fatalf("%s --version: %q, want %q", path, out, want)
			}
			// A second call is served from the cache: same file, not rebuilt.
			again, err := Binary(b.Image)
			if err != nil {
				t.Fatal(err)
			}
			fi2, err := os.Stat(again)
			if err != nil {
				t.Fatal(err)
			}
			if again != path || !fi2.ModTime().Equal(fi.ModTime()) {
				t.Fatalf("second Binary call rebuilt or moved the binary: %s -> %s", path, again)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, v := range []string{"3.5", "v3.5.21", "3.5.21", "registry.k8s.io/etcd:3.5.21-0"} {
		if b, err := Lookup(v); err != nil || b.Minor != "3.5" {
			t.Errorf("Lookup(%q) = %+v, %v", v, b, err)
		}
	}
	if _, err := Lookup("3.4"); err == nil || !strings.Contains(err.Error(), "known") {
		t.Errorf("Lookup(3.4) = %v, want an error listing the known builds", err)
	}
}
