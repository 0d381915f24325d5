package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestSurgeCopyIsOurs: a surge copy is written, read, listed and removed as
// stratum's own file; a sweep, a WriteAll, Strays and CheckShadows leave it
// in place and call it neither a stray nor a shadow; a second write of the
// same bytes and a second removal do nothing.
func TestSurgeCopyIsOurs(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	b := must(RenderSurgeBytes(st, Profile{}, nodestate.KubeAPIServer, ""))
	if err := s.WriteSurge(nodestate.KubeAPIServer, b); err != nil {
		t.Fatal(err)
	}
	p := s.SurgePath(nodestate.KubeAPIServer)
	if p != filepath.Join(s.Dir(), "kube-apiserver-surge.yaml") {
		t.Errorf("SurgePath = %s", p)
	}
	if got, _, err := durable.ReadRegular(p); err != nil || !slices.Equal(got, b) {
		t.Fatalf("on disk: %v", err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != FileMode {
		t.Errorf("mode %v, want %v", fi.Mode().Perm(), FileMode)
	}
	ino := inode(t, p)
	if err := s.WriteSurge(nodestate.KubeAPIServer, b); err != nil || inode(t, p) != ino {
		t.Errorf("a second write of the same bytes: %v, rewritten %v", err, inode(t, p) != ino)
	}
	if got, err := s.ReadSurge(nodestate.KubeAPIServer); err != nil || !slices.Equal(got, b) {
		t.Errorf("ReadSurge: %v", err)
	}
	if got, err := s.SurgeFiles(); err != nil || !reflect.DeepEqual(got, []string{"kube-apiserver-surge.yaml"}) {
		t.Errorf("SurgeFiles = %v, %v", got, err)
	}
	if strays, err := s.Strays(); err != nil || len(strays) != 0 {
		t.Errorf("Strays = %v, %v: a surge copy is not a stray", strays, err)
	}
	sw, err := s.Sweep()
	if err != nil || len(sw.Strays) != 0 || len(sw.Swept) != 0 || !reflect.DeepEqual(sw.Surges, []string{"kube-apiserver-surge.yaml"}) {
		t.Errorf("Sweep = %+v, %v", sw, err)
	}
	res, err := s.WriteAll(st)
	if err != nil || len(res.Strays) != 0 || !reflect.DeepEqual(res.Surges, []string{"kube-apiserver-surge.yaml"}) || len(res.Written) != 0 {
		t.Errorf("WriteAll = %+v, %v", res, err)
	}
	if err := s.CheckShadows(NamesFor(st)); err != nil {
		t.Errorf("CheckShadows: %v", err)
	}
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("the surge copy did not survive: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := s.RemoveSurge(nodestate.KubeAPIServer); err != nil {
			t.Fatalf("RemoveSurge %d: %v", i, err)
		}
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("still there after RemoveSurge: %v", err)
	}
	if _, err := s.ReadSurge(nodestate.KubeAPIServer); !errors.Is(err, ErrNoManifest) {
		t.Errorf("ReadSurge of none: %v, want ErrNoManifest", err)
	}
	if got, err := s.SurgeFiles(); err != nil || len(got) != 0 {
		t.Errorf("SurgeFiles = %v, %v", got, err)
	}
}

// TestWriteSurgeRefuses: a component without a surge copy, bytes that are
// not its surge pod, a symlink in the copy's place and a read-only store
// are refused, and nothing is written.
func TestWriteSurgeRefuses(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	b := must(RenderSurgeBytes(st, Profile{}, nodestate.Scheduler, ""))
	for _, name := range []string{nodestate.Etcd, nodestate.KubeVIP, "kube-proxy"} {
		if err := s.WriteSurge(name, b); !errors.Is(err, ErrNoSurge) {
			t.Errorf("WriteSurge(%s): %v, want ErrNoSurge", name, err)
		}
		if err := s.RemoveSurge(name); !errors.Is(err, ErrNoSurge) {
			t.Errorf("RemoveSurge(%s): %v, want ErrNoSurge", name, err)
		}
		if _, err := s.ReadSurge(name); !errors.Is(err, ErrNoSurge) {
			t.Errorf("ReadSurge(%s): %v, want ErrNoSurge", name, err)
		}
	}
	canonical := must(RenderBytes(st, Profile{}, nodestate.Scheduler, ""))
	for what, bad := range map[string][]byte{
		"the canonical pod":        canonical,
		"another component's copy": must(RenderSurgeBytes(st, Profile{}, nodestate.ControllerManager, "")),
		"not a pod":                []byte("apiVersion: v1\nkind: ConfigMap\n"),
		"nothing":                  nil,
	} {
		if err := s.WriteSurge(nodestate.Scheduler, bad); err == nil {
			t.Errorf("%s written as the scheduler's surge copy", what)
		}
	}
	if got := dirNames(t, s.Dir()); len(got) != 0 {
		t.Fatalf("refused writes left %v", got)
	}

	outside := filepath.Join(t.TempDir(), "victim.yaml")
	if err := os.WriteFile(outside, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, s.SurgePath(nodestate.Scheduler)); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteSurge(nodestate.Scheduler, b); !errors.Is(err, durable.ErrSymlink) {
		t.Errorf("WriteSurge over a symlink: %v", err)
	}
	if err := s.RemoveSurge(nodestate.Scheduler); !errors.Is(err, durable.ErrSymlink) {
		t.Errorf("RemoveSurge of a symlink: %v", err)
	}
	if _, err := s.ReadSurge(nodestate.Scheduler); err == nil {
		t.Error("ReadSurge followed a symlink")
	}
	if got, _ := os.ReadFile(outside); string(got) != "precious" {
		t.Fatal("written through the symlink")
	}
	if _, err := os.Lstat(s.SurgePath(nodestate.Scheduler)); err != nil {
		t.Fatalf("the symlink was removed: %v", err)
	}

	ro, err := OpenReadOnly(s.Dir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.WriteSurge(nodestate.KubeAPIServer, must(RenderSurgeBytes(st, Profile{}, nodestate.KubeAPIServer, ""))); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only WriteSurge: %v", err)
	}
	if err := ro.RemoveSurge(nodestate.Scheduler); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only RemoveSurge: %v", err)
	}
}

// TestSurgeStagingLeftoverIsSwept: a crash mid-write of a surge copy leaves
// renameio's hidden staging file, which a sweep removes like a manifest's.
func TestSurgeStagingLeftoverIsSwept(t *testing.T) {
	for _, f := range []string{".kube-apiserver-surge.yaml123", ".kube-scheduler-surge.yaml4"} {
		if l, v := IsStagingLeftover(f); !l || v {
			t.Errorf("IsStagingLeftover(%q) = %v, visible %v; want a hidden leftover", f, l, v)
		}
	}
	for _, f := range []string{".etcd-surge.yaml1", "kube-apiserver-surge.yaml", ".kube-apiserver-surge.yaml"} {
		if l, _ := IsStagingLeftover(f); l {
			t.Errorf("IsStagingLeftover(%q): not a leftover", f)
		}
	}
	s := newStore(t)
	if err := os.WriteFile(filepath.Join(s.Dir(), ".kube-apiserver-surge.yaml123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	sw, err := s.Sweep()
	if err != nil || !reflect.DeepEqual(sw.Swept, []string{".kube-apiserver-surge.yaml123"}) {
		t.Errorf("Sweep = %+v, %v", sw, err)
	}
}

// TestEditedSurgeCopyShadows: a surge copy whose pod bears the component's
// own name is one pod with the canonical manifest to kubelet: a shadow.
func TestEditedSurgeCopyShadows(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	b := must(RenderSurgeBytes(st, Profile{}, nodestate.KubeAPIServer, ""))
	edited := strings.Replace(string(b), "name: kube-apiserver-surge\n", "name: kube-apiserver\n", 1)
	if edited == string(b) {
		t.Fatal("no pod name to edit")
	}
	if err := os.WriteFile(s.SurgePath(nodestate.KubeAPIServer), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	var se *ShadowError
	if err := s.CheckShadows(NamesFor(st)); !errors.As(err, &se) || se.File != "kube-apiserver-surge.yaml" || se.Component != nodestate.KubeAPIServer {
		t.Errorf("CheckShadows = %v, want the edited copy shadowing kube-apiserver", err)
	}
}
