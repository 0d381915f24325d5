package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKubeletBinary builds each kubelet of the run (or finds it in the
// cache), runs it, and checks that a second call is served from the cache.
func TestKubeletBinary(t *testing.T) {
	requireE2E(t)
	ks, _, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		t.Run(k.Version, func(t *testing.T) {
			start := time.Now()
			path, built, err := KubeletBinary(t.Context(), k)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kubelet %s (built now: %v) in %s", path, built, time.Since(start).Round(time.Second))
			out, err := exec.Command(path, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Kubernetes "+k.Version) {
				t.Fatalf("%s --version: %q %v", path, out, err)
			}
			again, builtAgain, err := KubeletBinary(t.Context(), k)
			if err != nil || again != path || builtAgain {
				t.Fatalf("second call: %s built=%v %v; want the cached %s", again, builtAgain, err, path)
			}
		})
	}
}

// TestSelectKubelets: KUBELET names a version or a minor, or several;
// unset is every kubelet, not selected; an unknown one is an error naming
// the known versions.
func TestSelectKubelets(t *testing.T) {
	all, selected, err := SelectKubelets("")
	if err != nil || selected || len(all) != len(Kubelets) {
		t.Fatalf(`SelectKubelets("") = %v, %v, %v; want every kubelet, not selected`, all, selected, err)
	}
	for _, sel := range []string{"v1.34.4", "1.34.4", "1.34", " v1.34 "} {
		ks, selected, err := SelectKubelets(sel)
		if err != nil || !selected || len(ks) != 1 || ks[0].Version != "v1.34.4" {
			t.Errorf("SelectKubelets(%q) = %v, %v, %v; want v1.34.4, selected", sel, ks, selected, err)
		}
	}
	ks, _, err := SelectKubelets("1.34,v1.37.2")
	if err != nil || len(ks) != 2 || ks[0].Version != "v1.37.2" || ks[1].Version != "v1.34.4" {
		t.Errorf("two kubelets: %v %v; want both, newest first", ks, err)
	}
	for _, bad := range []string{"v1.35.0", "1.3", "latest", "1.34,"} {
		if _, _, err := SelectKubelets(bad); err == nil || !strings.Contains(err.Error(), "v1.37.2, v1.34.4") {
			t.Errorf("SelectKubelets(%q): error %v, want one listing the known versions", bad, err)
		}
	}
	if Kubelets[0].Version != "v1.37.2" {
		t.Errorf("the newest kubelet, which runs every scenario, is %s", Kubelets[0].Version)
	}
}

func TestIsStatic(t *testing.T) {
	static, err := IsStatic("/bin/sh")
	if err != nil {
		t.Skip(err)
	}
	if static {
		t.Error("/bin/sh reported static")
	}
}
