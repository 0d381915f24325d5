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
// unset is every kubelet but those run only when selected (v1.35.4: CI
// time), not selected; an unknown one is an error naming the known
// versions.
func TestSelectKubelets(t *testing.T) {
	versions := func(ks []Kubelet) (out []string) {
		for _, k := range ks {
			out = append(out, k.Version)
		}
		return out
	}
	all, selected, err := SelectKubelets("")
	if got := strings.Join(versions(all), ","); err != nil || selected || got != "v1.37.2,v1.34.4" {
		t.Fatalf(`SelectKubelets("") = %s, %v, %v; want v1.37.2,v1.34.4 (not v1.35.4), not selected`, got, selected, err)
	}
	for want, sels := range map[string][]string{
		"v1.34.4": {"v1.34.4", "1.34.4", "1.34", " v1.34 "},
		"v1.35.4": {"v1.35.4", "1.35.4", "1.35", "v1.35"},
	} {
		for _, sel := range sels {
			ks, selected, err := SelectKubelets(sel)
			if err != nil || !selected || len(ks) != 1 || ks[0].Version != want {
				t.Errorf("SelectKubelets(%q) = %v, %v, %v; want %s, selected", sel, ks, selected, err, want)
			}
		}
	}
	ks, _, err := SelectKubelets("1.34,v1.37.2,1.35")
	if got := strings.Join(versions(ks), ","); err != nil || got != "v1.37.2,v1.35.4,v1.34.4" {
		t.Errorf("three kubelets: %s %v; want all three, newest first", got, err)
	}
	for _, bad := range []string{"v1.35.0", "1.3", "latest", "1.34,"} {
		if _, _, err := SelectKubelets(bad); err == nil || !strings.Contains(err.Error(), "v1.37.2, v1.35.4, v1.34.4") {
			t.Errorf("SelectKubelets(%q): error %v, want one listing the known versions", bad, err)
		}
	}
	if Kubelets[0].Version != "v1.37.2" || Kubelets[0].OnlyWhenSelected {
		t.Errorf("the newest kubelet, which runs every scenario by default, is %+v", Kubelets[0])
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
