package manifest

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// inputsNode is the default-vip state with its PKI and kubeconfig
// directories in a temporary directory, every file its flags name (start-only
// and reloaded alike) written there with contents of its own.
func inputsNode(t *testing.T) *nodestate.NodeState {
	t.Helper()
	st := loadState(t, "default-vip")
	root := t.TempDir()
	st.PKIDir = filepath.Join(root, "pki")
	st.KubeconfigDir = root
	for _, f := range allNamedFiles(st) {
		writeInput(t, f, "first "+f)
	}
	return st
}

// allNamedFiles is every file a flag of st's renders names, relative names
// resolved.
func allNamedFiles(st *nodestate.NodeState) []string {
	rel := []string{
		"ca.crt", "ca.key", "sa.key", "sa.pub", "apiserver.crt", "apiserver.key",
		"apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"apiserver-etcd-client.crt", "apiserver-etcd-client.key",
		"front-proxy-ca.crt", "front-proxy-client.crt", "front-proxy-client.key",
		"etcd/ca.crt", "etcd/server.crt", "etcd/server.key", "etcd/peer.crt", "etcd/peer.key",
	}
	var out []string
	for _, r := range rel {
		out = append(out, pki(st, r))
	}
	for _, k := range []string{"admin.conf", "controller-manager.conf", "scheduler.conf"} {
		out = append(out, filepath.Join(st.KubeconfigDir, k))
	}
	return out
}

func writeInput(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// inputHashes renders every component of st from its files as on disk and
// returns each one's InputsAnnotation.
func inputHashes(t *testing.T, st *nodestate.NodeState) map[string]string {
	t.Helper()
	prof, err := LoadProfile(st)
	if err != nil {
		t.Fatalf("LoadProfile: %v", err)
	}
	out := map[string]string{}
	for _, name := range NamesFor(st) {
		pod, err := Render(st, prof, name, "")
		if err != nil {
			t.Fatalf("render %s: %v", name, err)
		}
		h := pod.Annotations[InputsAnnotation]
		if len(h) != 64 {
			t.Fatalf("%s: %s is %q, want a sha256", name, InputsAnnotation, h)
		}
		out[name] = h
	}
	return out
}

// moved is the components whose hash differs between a and b, in roster
// order.
func moved(st *nodestate.NodeState, a, b map[string]string) []string {
	var out []string
	for _, name := range NamesFor(st) {
		if a[name] != b[name] {
			out = append(out, name)
		}
	}
	return out
}

// TestInputsHashMovesOnReaders rewrites one file at a time and checks that
// the hash moves on exactly the components that read that file only at
// start, and on none for a file every reader reloads.
func TestInputsHashMovesOnReaders(t *testing.T) {
	const (
		etcd  = nodestate.Etcd
		api   = nodestate.KubeAPIServer
		kcm   = nodestate.ControllerManager
		sched = nodestate.Scheduler
		vip   = nodestate.KubeVIP
	)
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"pki/etcd/ca.crt", []string{etcd, api}},
		{"pki/sa.key", []string{api, kcm}},
		{"pki/sa.pub", []string{api}},
		{"pki/ca.crt", []string{kcm}}, // root-ca-file; the apiserver's and kcm's client CA reload
		{"controller-manager.conf", []string{kcm}},
		{"scheduler.conf", []string{sched}},
		{"admin.conf", []string{vip}},
		// Reloaded by every component that names them.
		{"pki/ca.key", nil},
		{"pki/apiserver.crt", nil},
		{"pki/apiserver.key", nil},
		{"pki/front-proxy-ca.crt", nil},
		{"pki/front-proxy-client.key", nil},
		{"pki/apiserver-kubelet-client.crt", nil},
		{"pki/apiserver-etcd-client.key", nil},
		{"pki/etcd/server.crt", nil},
		{"pki/etcd/peer.key", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			st := inputsNode(t)
			before := inputHashes(t, st)
			writeInput(t, filepath.Join(st.KubeconfigDir, tc.file), "rotated")
			if got := moved(st, before, inputHashes(t, st)); !slices.Equal(got, tc.want) {
				t.Fatalf("rewriting %s moved the hash of %v, want %v", tc.file, got, tc.want)
			}
		})
	}
}

// TestInputPathsMatchTheFlags checks InputPaths against the flags the
// render writes: every path is in the component's argv (kube-vip's args).
func TestInputPathsMatchTheFlags(t *testing.T) {
	st := inputsNode(t)
	for _, name := range NamesFor(st) {
		paths, err := InputPaths(st, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(paths) == 0 {
			t.Fatalf("%s has no start-only input", name)
		}
		pod, err := Render(st, Profile{}, name, "")
		if err != nil {
			t.Fatal(err)
		}
		argv := strings.Join(append(pod.Spec.Containers[0].Command, pod.Spec.Containers[0].Args...), " ")
		for _, p := range paths {
			if !strings.Contains(argv, "="+p) {
				t.Errorf("%s: input %s is not named by a flag: %s", name, p, argv)
			}
		}
	}
	if _, err := InputPaths(st, "kube-proxy"); err == nil {
		t.Fatal("InputPaths of an unknown component: no error")
	}
}

// TestInputsAbsentIsNotEmpty: a missing file loads as absent, not as an
// error, and hashes differently from an empty file and from its contents.
func TestInputsAbsentIsNotEmpty(t *testing.T) {
	st := inputsNode(t)
	path := filepath.Join(st.KubeconfigDir, "scheduler.conf")
	present := inputHashes(t, st)[nodestate.Scheduler]
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	in, err := LoadInputs(st)
	if err != nil {
		t.Fatalf("LoadInputs with a missing file: %v", err)
	}
	if f, ok := in[path]; !ok || f.Present {
		t.Fatalf("missing %s loaded as %+v (known %v)", path, f, ok)
	}
	absent := inputHashes(t, st)[nodestate.Scheduler]
	writeInput(t, path, "")
	empty := inputHashes(t, st)[nodestate.Scheduler]
	if absent == present || absent == empty || empty == present {
		t.Fatalf("present %s, absent %s, empty %s: want three values", present, absent, empty)
	}
	// A fresh node: no PKI, no kubeconfigs. Every component renders.
	st.PKIDir = filepath.Join(t.TempDir(), "none")
	st.KubeconfigDir = st.PKIDir
	inputHashes(t, st)
}

// TestInputsDeterministic: the same files give the same hashes, loaded
// twice; a Profile without Inputs hashes every file as absent.
func TestInputsDeterministic(t *testing.T) {
	st := inputsNode(t)
	a, b := inputHashes(t, st), inputHashes(t, st)
	if !maps.Equal(a, b) {
		t.Fatalf("two loads of the same files: %v and %v", a, b)
	}
	in, err := LoadInputs(st)
	if err != nil {
		t.Fatal(err)
	}
	none := Inputs{}
	for p := range in {
		none[p] = InputFile{}
	}
	paths, _ := InputPaths(st, nodestate.KubeAPIServer)
	if got, want := (Inputs{}).hash(paths), none.hash(paths); got != want {
		t.Fatalf("no entry %s, absent entries %s: want equal", got, want)
	}
	rev := slices.Clone(paths)
	slices.Reverse(rev)
	if in.hash(paths) != in.hash(rev) {
		t.Fatal("the hash depends on the order of the paths")
	}
}

// TestInputsRefuseSymlink: a symlink where a start-only file belongs is an
// error naming it (durable.ReadRegular), and LoadProfile fails with it.
func TestInputsRefuseSymlink(t *testing.T) {
	st := inputsNode(t)
	path := pki(st, "sa.key")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pki(st, "sa.pub"), path); err != nil {
		t.Fatal(err)
	}
	_, err := LoadProfile(st)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("LoadProfile with a symlinked %s: %v", path, err)
	}
}

// TestInputsExtraArgs: an encryption configuration set by an extra arg is a
// start-only input unless the apiserver reloads it by itself.
func TestInputsExtraArgs(t *testing.T) {
	st := inputsNode(t)
	enc := filepath.Join(st.KubeconfigDir, "encryption.yaml")
	writeInput(t, enc, "first")
	st.SetExtraArg(nodestate.KubeAPIServer, "encryption-provider-config", enc)
	before := inputHashes(t, st)
	writeInput(t, enc, "rotated")
	if got := moved(st, before, inputHashes(t, st)); !slices.Equal(got, []string{nodestate.KubeAPIServer}) {
		t.Fatalf("rewriting the encryption configuration moved %v", got)
	}
	st.SetExtraArg(nodestate.KubeAPIServer, "encryption-provider-config-automatic-reload", "true")
	before = inputHashes(t, st)
	writeInput(t, enc, "rotated again")
	if got := moved(st, before, inputHashes(t, st)); len(got) != 0 {
		t.Fatalf("a reloaded encryption configuration moved %v", got)
	}
}

// TestInputsOnly: a manifest written before a start-only file changed (or
// before the annotation existed) differs from the render in the inputs
// annotation alone; an exact render and a hand edit do not.
func TestInputsOnly(t *testing.T) {
	st := inputsNode(t)
	name := nodestate.Scheduler
	prof, err := LoadProfile(st)
	if err != nil {
		t.Fatal(err)
	}
	old, err := RenderBytes(st, prof, name, "2026-01-01T00:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	if InputsOnly(st, prof, name, old) {
		t.Fatal("the exact render counts as inputs-only")
	}
	writeInput(t, filepath.Join(st.KubeconfigDir, "scheduler.conf"), "rotated")
	if prof, err = LoadProfile(st); err != nil {
		t.Fatal(err)
	}
	if !InputsOnly(st, prof, name, old) {
		t.Fatal("the manifest from before the rotation is not inputs-only")
	}
	if InputsOnly(st, prof, nodestate.KubeAPIServer, old) {
		t.Fatal("the scheduler's manifest counts as the apiserver's")
	}
	pod, err := DecodePod(old)
	if err != nil {
		t.Fatal(err)
	}
	delete(pod.Annotations, InputsAnnotation)
	legacy, err := Encode(pod)
	if err != nil {
		t.Fatal(err)
	}
	if !InputsOnly(st, prof, name, legacy) {
		t.Fatal("a manifest without the annotation is not inputs-only")
	}
	pod.Spec.Containers[0].Image += "-edited"
	edited, err := Encode(pod)
	if err != nil {
		t.Fatal(err)
	}
	if InputsOnly(st, prof, name, edited) {
		t.Fatal("a hand-edited manifest counts as inputs-only")
	}
	if InputsOnly(st, prof, name, []byte("not yaml: [")) {
		t.Fatal("garbage counts as inputs-only")
	}
}
