package manifest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

var update = flag.Bool("update", false, "rewrite manifest/testdata/golden from the current renderer")

// repoTestdata is the repository-level testdata directory.
const repoTestdata = "../testdata"

// states are the node states under testdata/states, rendered into goldens.
var states = []string{"default", "default-vip", "cis", "current", "pod-fields"}

// loadState loads testdata/states/<name>.yaml through nodestate.Load.
func loadState(t *testing.T, name string) *nodestate.NodeState {
	t.Helper()
	st, err := nodestate.Load(filepath.Join(repoTestdata, "states", name+".yaml"))
	if err != nil {
		t.Fatalf("load state %s: %v", name, err)
	}
	return st
}

// testProfile is the Profile of st as LoadProfile would read it on a node,
// taken from testdata/profiles: the states name the files under
// /etc/stratum, where they live on a real node, and Render never reads them,
// so the goldens carry the real paths and the testdata contents.
func testProfile(t *testing.T, st *nodestate.NodeState) Profile {
	t.Helper()
	if st.Profile.Name != nodestate.ProfileCIS {
		return Profile{}
	}
	return Profile{
		AuditPolicy:     readFile(t, filepath.Join(repoTestdata, "profiles", "audit-policy.yaml")),
		AdmissionConfig: readFile(t, filepath.Join(repoTestdata, "profiles", "admission.yaml")),
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkGolden compares got with testdata/golden/<state>/<file>, or rewrites
// it under -update.
func checkGolden(t *testing.T, state, file string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", state, file)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./manifest -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the render; if the change is intended run go test ./manifest -run Golden -update and review the diff\n--- got\n%s", path, got)
	}
}

func TestGolden(t *testing.T) {
	for _, state := range states {
		t.Run(state, func(t *testing.T) {
			st := loadState(t, state)
			prof := testProfile(t, st)
			want := map[string]bool{}
			for _, name := range NamesFor(st) {
				want[FileName(name)] = true
				b, err := RenderBytes(st, prof, name, "")
				if err != nil {
					t.Fatalf("render %s: %v", name, err)
				}
				checkGolden(t, state, FileName(name), b)
			}
			derived, err := DerivedFiles(st, prof)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range derived {
				want["derived-"+filepath.Base(d.Path)] = true
				checkGolden(t, state, "derived-"+filepath.Base(d.Path), d.Data)
			}
			if *update {
				return
			}
			// No golden file is left over from a component or derived
			// file the state no longer renders.
			entries, err := os.ReadDir(filepath.Join("testdata", "golden", state))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if !want[e.Name()] {
					t.Errorf("stale golden %s/%s: the state does not render it", state, e.Name())
				}
			}
		})
	}
}

// TestRenderRefusesWhatTheVersionRefuses pins the version checks of
// Render: an unsupported version and a flag set the binary at that version
// would exit on are errors naming the component, the flag and the version.
func TestRenderRefusesWhatTheVersionRefuses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      func(st *nodestate.NodeState)
		component string
		want      string
	}{
		{"etcd too old", func(st *nodestate.NodeState) { st.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.4.30-0" },
			nodestate.Etcd, "render etcd: etcd 3.4.30 is not supported: stratum-upgrade renders etcd 3.5, 3.6, 3.7"},
		{"apiserver too new", func(st *nodestate.NodeState) {
			st.Images[nodestate.KubeAPIServer] = "registry.k8s.io/kube-apiserver:v1.38.0"
		}, nodestate.KubeAPIServer, "kube-apiserver 1.38.0 is not supported"},
		{"etcd both forms", func(st *nodestate.NodeState) {
			st.SetExtraArg(nodestate.Etcd, "experimental-watch-progress-notify-interval", "10s")
		}, nodestate.Etcd, "render etcd: --experimental-watch-progress-notify-interval: etcd 3.7.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := loadState(t, "current")
			tc.edit(st)
			_, err := Render(st, Profile{}, tc.component, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render = %v, want an error containing %q", err, tc.want)
			}
			if _, err := Target(st, tc.component); tc.name != "etcd both forms" && err == nil {
				t.Errorf("Target of an unsupported version succeeded")
			}
		})
	}
}
