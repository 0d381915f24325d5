package manifest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// tempState loads testdata/states/<name>.yaml with every path it writes or
// reads moved under a temp dir: the config dir for derived files and the
// profile files, copied from testdata/profiles.
func tempState(t *testing.T, name string) *nodestate.NodeState {
	t.Helper()
	st := loadState(t, name)
	root := t.TempDir()
	st.ConfigDir = filepath.Join(root, "stratum")
	if st.Profile.Name == nodestate.ProfileCIS {
		for _, f := range []struct {
			dst *string
			src string
		}{{&st.Profile.AuditPolicyFile, "audit-policy.yaml"}, {&st.Profile.AdmissionConfigFile, "admission.yaml"}} {
			p := filepath.Join(root, f.src)
			if err := os.WriteFile(p, readFile(t, filepath.Join(repoTestdata, "profiles", f.src)), 0o600); err != nil {
				t.Fatal(err)
			}
			*f.dst = p
		}
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	return st
}

func newStore(t *testing.T) *Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "manifests")
	s, err := Create(dir, Options{Scanner: proc.Host().Within(os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteAllIsIdempotentAndOverwritesHandEdits(t *testing.T) {
	for _, name := range states {
		t.Run(name, func(t *testing.T) {
			st := tempState(t, name)
			s := newStore(t)
			res, err := s.WriteAll(st)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Written, NamesFor(st)) {
				t.Fatalf("first WriteAll wrote %v, want %v", res.Written, NamesFor(st))
			}
			prof, err := LoadProfile(st)
			if err != nil {
				t.Fatal(err)
			}
			for _, comp := range NamesFor(st) {
				want, _ := RenderBytes(st, prof, comp, "")
				got, err := s.Read(comp)
				if err != nil || string(got) != string(want) {
					t.Fatalf("%s on disk is not its render (%v)", comp, err)
				}
				fi, _ := os.Stat(s.Path(comp))
				if fi.Mode().Perm() != FileMode {
					t.Errorf("%s mode %v, want %v", comp, fi.Mode().Perm(), FileMode)
				}
			}
			mtimes := map[string]time.Time{}
			for _, comp := range NamesFor(st) {
				fi, _ := os.Stat(s.Path(comp))
				mtimes[comp] = fi.ModTime()
			}
			time.Sleep(10 * time.Millisecond)
			res, err = s.WriteAll(st)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Written) != 0 || len(res.Derived) != 0 {
				t.Fatalf("second WriteAll wrote %v %v", res.Written, res.Derived)
			}
			for _, comp := range NamesFor(st) {
				fi, _ := os.Stat(s.Path(comp))
				if !fi.ModTime().Equal(mtimes[comp]) {
					t.Errorf("%s rewritten by a no-op WriteAll", comp)
				}
			}
			// A hand edit is overwritten by the next WriteAll.
			edited := strings.Replace(string(must(s.Read(nodestate.Scheduler))), "--profiling", "--profiling-hand-edit", 1)
			if err := os.WriteFile(s.Path(nodestate.Scheduler), []byte(edited+"\n# hand edit\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			res, err = s.WriteAll(st)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Written, []string{nodestate.Scheduler}) {
				t.Fatalf("after a hand edit WriteAll wrote %v", res.Written)
			}
			if strings.Contains(string(must(s.Read(nodestate.Scheduler))), "hand edit") {
				t.Fatal("hand edit survived WriteAll")
			}
			if st.Profile.Name == nodestate.ProfileCIS {
				p := filepath.Join(st.ConfigDir, "admission-config.yaml")
				fi, err := os.Stat(p)
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("derived admission config: %v %v", fi, err)
				}
			}
			for _, e := range dirNames(t, s.Dir()) {
				if _, ok := ManifestName(e); !ok {
					t.Errorf("unexpected entry %s in manifest dir", e)
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestKubeVIPFollowsTheVIP(t *testing.T) {
	st := tempState(t, "default-vip")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Exists(nodestate.KubeVIP); !ok {
		t.Fatal("kube-vip not rendered for a node with a VIP")
	}
	noVIP := st.Clone()
	noVIP.VIP = nil
	delete(noVIP.Images, nodestate.KubeVIP)
	res, err := s.WriteAll(noVIP)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Removed, []string{nodestate.KubeVIP}) {
		t.Fatalf("removed %v, want kube-vip", res.Removed)
	}
	if ok, _ := s.Exists(nodestate.KubeVIP); ok {
		t.Fatal("kube-vip manifest left after the VIP was dropped")
	}
	res, err = s.WriteAll(st)
	if err != nil || !reflect.DeepEqual(res.Written, []string{nodestate.KubeVIP}) {
		t.Fatalf("VIP back: wrote %v, %v", res.Written, err)
	}
}

func TestStagingLeftoversSweptStraysKept(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	leftovers := []string{"kube-apiserver.yaml.tmp", "etcd.yaml.tmp123456", "kube-scheduler.yaml.new", "kube-controller-manager.yaml~", ".etcd.yaml4242"}
	strays := []string{"etcd.yaml.bak", "README", "kube-proxy.yaml"}
	for _, f := range append(append([]string{}, leftovers...), strays...) {
		if err := os.WriteFile(filepath.Join(s.Dir(), f), []byte("apiVersion: v1\nkind: Pod\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.WriteAll(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Swept) != len(leftovers) {
		t.Errorf("swept %v, want %v", res.Swept, leftovers)
	}
	for _, f := range leftovers {
		if _, err := os.Lstat(filepath.Join(s.Dir(), f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s not swept", f)
		}
	}
	for _, f := range strays {
		if _, err := os.Lstat(filepath.Join(s.Dir(), f)); err != nil {
			t.Errorf("stray %s deleted: strays are reported, never deleted", f)
		}
	}
	got, _ := s.Strays()
	if !reflect.DeepEqual(got, []string{"README", "etcd.yaml.bak", "kube-proxy.yaml"}) {
		t.Errorf("Strays = %v", got)
	}
}

func TestIsStagingLeftover(t *testing.T) {
	cases := []struct {
		file             string
		leftover, hidden bool
	}{
		{"etcd.yaml.tmp", true, false},
		{"etcd.yaml.tmp0042", true, false},
		{"etcd.yaml.new", true, false},
		{"etcd.yaml~", true, false},
		{".kube-apiserver.yaml123", true, true},
		{"etcd.yaml", false, false},
		{"etcd.yaml.bak", false, false},
		{"kube-proxy.yaml.tmp", false, false},
		{".etcd.yaml.swp", false, false},
		{"etcd.yaml.tmpx", false, false},
	}
	for _, c := range cases {
		l, v := IsStagingLeftover(c.file)
		if l != c.leftover || (l && v == c.hidden) {
			t.Errorf("IsStagingLeftover(%q) = %v, visible %v", c.file, l, v)
		}
	}
}

func TestSymlinkInPlaceOfManifestIsRefused(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	outside := filepath.Join(t.TempDir(), "victim.yaml")
	if err := os.WriteFile(outside, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, s.Path(nodestate.Scheduler)); err != nil {
		t.Fatal(err)
	}
	_, err := s.WriteAll(st)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("WriteAll with a symlinked manifest: %v", err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "precious" {
		t.Fatal("symlink target was written through")
	}
	if got := dirNames(t, s.Dir()); !reflect.DeepEqual(got, []string{"kube-scheduler.yaml"}) {
		t.Fatalf("WriteAll wrote something before refusing: %v", got)
	}
	if _, err := s.Read(nodestate.Scheduler); err == nil {
		t.Fatal("Read followed a symlink")
	}
	if _, err := s.Put(nodestate.Scheduler, must(RenderBytes(st, Profile{}, nodestate.Scheduler, ""))); err == nil {
		t.Fatal("Put replaced a symlink")
	}
}

func TestOpenRefusesBadDirectories(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "manifests")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	cases := map[string]struct{ dir, want string }{
		"symlink":      {link, "symbolic link"},
		"missing":      {filepath.Join(real, "nope"), "does not exist"},
		"not a dir":    {file, "not a directory"},
		"not writable": {"/proc/1", "not writable"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Open(c.dir, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open(%s) = %v, want error containing %q", c.dir, err, c.want)
			}
		})
	}
}

func TestRestartAndRestartAsIs(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	before := must(s.Read(nodestate.Scheduler))
	stamp, err := s.Restart(st, nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	after := must(s.Read(nodestate.Scheduler))
	pod := must(DecodePod(after))
	if RestartedAt(pod) != stamp || stamp == "" {
		t.Fatalf("restarted-at %q, want %q", RestartedAt(pod), stamp)
	}
	if cleared, _ := SetRestartedAt(after, ""); string(cleared) != string(must(SetRestartedAt(before, ""))) {
		t.Fatal("Restart changed more than restarted-at")
	}
	// WriteAll keeps the stamp: only Restart and RestartAsIs change it.
	if res, err := s.WriteAll(st); err != nil || len(res.Written) != 0 {
		t.Fatalf("WriteAll after Restart wrote %v (%v)", res.Written, err)
	}
	// RestartAsIs keeps the bytes on disk, images included.
	old := strings.Replace(string(after), "kube-scheduler:v1.34.4", "kube-scheduler:v1.33.9", 1)
	if _, err := s.Put(nodestate.Scheduler, []byte(old)); err != nil {
		t.Fatal(err)
	}
	changed, err := s.RestartAsIs(nodestate.Scheduler, "2026-12-02T00:00:00Z")
	if err != nil || !changed {
		t.Fatalf("RestartAsIs: %v %v", changed, err)
	}
	got := must(DecodePod(must(s.Read(nodestate.Scheduler))))
	if got.Spec.Containers[0].Image != "registry.k8s.io/kube-scheduler:v1.33.9" || RestartedAt(got) != "2026-12-02T00:00:00Z" {
		t.Fatalf("RestartAsIs re-rendered: image %s stamp %s", got.Spec.Containers[0].Image, RestartedAt(got))
	}
	// The same stamp again is a no-op: a resumed rollback rewrites nothing.
	if changed, err := s.RestartAsIs(nodestate.Scheduler, "2026-12-02T00:00:00Z"); err != nil || changed {
		t.Fatalf("RestartAsIs with the same stamp: changed %v %v", changed, err)
	}
	if _, err := s.RestartAsIs(nodestate.KubeVIP, "x"); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("RestartAsIs without a manifest: %v", err)
	}
}

func TestPutAndReadContainerSpec(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.Put("kube-proxy", []byte("x")); !errors.Is(err, ErrUnknownComponent) {
		t.Fatalf("Put of an unknown component: %v", err)
	}
	if _, err := s.Put(nodestate.Scheduler, []byte("not: [a pod")); err == nil {
		t.Fatal("Put accepted bytes that are not a pod")
	}
	if entries := dirNames(t, s.Dir()); len(entries) != 0 {
		t.Fatalf("refused Put left %v", entries)
	}
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(must(s.Read(nodestate.Scheduler))), "--bind-address=127.0.0.1", "--bind-address=0.0.0.0", 1)
	if _, err := s.Put(nodestate.Scheduler, []byte(edited)); err != nil {
		t.Fatal(err)
	}
	spec, err := s.ReadContainerSpec(nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Command[0] != "kube-scheduler" || !contains(spec.Argv, "--bind-address=0.0.0.0") {
		t.Fatalf("ReadContainerSpec does not show what is on disk: %v", spec.Argv)
	}
	if _, err := s.ReadContainerSpec(nodestate.KubeVIP); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("ReadContainerSpec without manifest: %v", err)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestStopWaitsForTheProcess(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	start := func() *exec.Cmd {
		cmd := &exec.Cmd{Path: sleep, Args: []string{"kube-scheduler", "60"}, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	// Nobody stops the process: Stop removes the manifest, then times out
	// naming the survivor.
	cmd := start()
	err = s.Stop(context.Background(), st, nodestate.Scheduler, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), itoa(cmd.Process.Pid)) {
		t.Fatalf("Stop with a surviving process: %v", err)
	}
	if ok, _ := s.Exists(nodestate.Scheduler); ok {
		t.Fatal("Stop did not remove the manifest")
	}
	// The process exits while Stop waits (as kubelet would kill it).
	go func() { time.Sleep(100 * time.Millisecond); cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	if err := s.Stop(context.Background(), st, nodestate.Scheduler, 10*time.Second); err != nil {
		t.Fatalf("Stop after the process exited: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestSetRestartedAtEmptyRemoves(t *testing.T) {
	st := tempState(t, "default")
	for _, comp := range NamesFor(st) {
		plain := must(RenderBytes(st, Profile{}, comp, ""))
		stamped := must(SetRestartedAt(plain, "2026-01-01T00:00:00Z"))
		if string(stamped) != string(must(RenderBytes(st, Profile{}, comp, "2026-01-01T00:00:00Z"))) {
			t.Errorf("%s: SetRestartedAt differs from rendering with the stamp", comp)
		}
		if back := must(SetRestartedAt(stamped, "")); string(back) != string(plain) {
			t.Errorf("%s: SetRestartedAt(\"\") does not give back the unstamped render", comp)
		}
	}
}

func TestOpenReadOnlyWritesNothing(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(s.Dir())
	time.Sleep(10 * time.Millisecond)
	ro, err := OpenReadOnly(s.Dir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Read(nodestate.Etcd); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.ReadContainerSpec(nodestate.Scheduler); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(s.Dir()); !after.ModTime().Equal(fi.ModTime()) {
		t.Fatal("OpenReadOnly changed the directory")
	}
	for name, err := range map[string]error{
		"WriteAll":    second(ro.WriteAll(st)),
		"Put":         second(ro.Put(nodestate.Etcd, must(s.Read(nodestate.Etcd)))),
		"Remove":      second(ro.Remove(nodestate.Etcd)),
		"RestartAsIs": second(ro.RestartAsIs(nodestate.Etcd, "x")),
		"Sweep":       second(ro.Sweep()),
	} {
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on a read-only store: %v", name, err)
		}
	}
	if _, err := OpenReadOnly(filepath.Join(s.Dir(), "nope"), Options{}); err == nil {
		t.Fatal("OpenReadOnly of a missing dir")
	}
}

func second[T any](_ T, err error) error { return err }

func TestLockDir(t *testing.T) {
	dir := t.TempDir()
	release, err := LockDir(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// flock is per open file description: a second open in this process
	// contends like another process would.
	if _, err := LockDir(dir, 100*time.Millisecond); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second lock: %v", err)
	}
	release()
	release2, err := LockDir(dir, time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release2()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("LockDir created %v", entries)
	}
	if rel, err := LockDir(filepath.Join(dir, "missing"), time.Second); err != nil {
		t.Fatalf("lock of a missing dir: %v", err)
	} else {
		rel()
	}
}

// An entry named like a staging leftover that is not a regular file was not
// left by a writer of ours: kubelet does not run a directory, fifo or
// socket, and a symlink is someone else's. Every sweep (and so every write)
// reports it as a stray, never removes it and never fails on it; the
// regular-file leftovers beside it are still swept.
func TestNonRegularLeftoversAreStraysNeverRemoved(t *testing.T) {
	st := tempState(t, "default")
	s := newStore(t)
	if _, err := s.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(pod, []byte("apiVersion: v1\nkind: Pod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mk := map[string]func(p string) error{
		"kube-apiserver.yaml.new": func(p string) error { // the issue: a non-empty directory
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(p, "keep"), []byte("x"), 0o600)
		},
		"etcd.yaml.tmp":                     func(p string) error { return os.Mkdir(p, 0o700) }, // empty: os.Remove would take it
		"kube-scheduler.yaml~":              func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"kube-controller-manager.yaml.tmp7": func(p string) error { return os.Symlink(pod, p) },
		"etcd.yaml.new":                     func(p string) error { return os.Symlink("/nonexistent", p) },
	}
	hidden := ".etcd.yaml4242" // kubelet ignores it: left alone, not reported
	types := map[string]os.FileMode{}
	for name, fn := range mk {
		if err := fn(filepath.Join(s.Dir(), name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(s.Dir(), hidden), 0o700); err != nil {
		t.Fatal(err)
	}
	regular := "kube-scheduler.yaml.new"
	if err := os.WriteFile(filepath.Join(s.Dir(), regular), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(dirNames(t, s.Dir()), hidden) {
		if fi, err := os.Lstat(filepath.Join(s.Dir(), name)); err == nil {
			types[name] = fi.Mode().Type()
		}
	}
	var wantStrays []string
	for name := range mk {
		wantStrays = append(wantStrays, name)
	}
	sort.Strings(wantStrays)

	res, err := s.Sweep()
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if !reflect.DeepEqual(res.Swept, []string{regular}) {
		t.Errorf("Swept = %v, want only the regular leftover %s", res.Swept, regular)
	}
	got := append([]string(nil), res.Strays...)
	sort.Strings(got)
	if !reflect.DeepEqual(got, wantStrays) {
		t.Errorf("Strays = %v, want %v", got, wantStrays)
	}
	check := func(after string) {
		t.Helper()
		for name, typ := range types {
			if name == regular {
				continue
			}
			fi, err := os.Lstat(filepath.Join(s.Dir(), name))
			if err != nil || fi.Mode().Type() != typ {
				t.Errorf("after %s: %s changed or removed (%v)", after, name, err)
			}
		}
		if _, err := os.Stat(filepath.Join(s.Dir(), "kube-apiserver.yaml.new", "keep")); err != nil {
			t.Errorf("after %s: the stray directory's content is gone: %v", after, err)
		}
	}
	check("Sweep")
	// Every write sweeps first: none fails on them.
	if wr, err := s.WriteAll(st); err != nil {
		t.Errorf("WriteAll: %v", err)
	} else if len(wr.Strays) != len(wantStrays) {
		t.Errorf("WriteAll strays %v, want %v", wr.Strays, wantStrays)
	}
	if _, err := s.Put(nodestate.Etcd, must(s.Read(nodestate.Etcd))); err != nil {
		t.Errorf("Put: %v", err)
	}
	if _, err := s.RestartAsIs(nodestate.Scheduler, "2026-01-01T00:00:00Z"); err != nil {
		t.Errorf("RestartAsIs: %v", err)
	}
	check("writes")
	strays, err := s.Strays()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(strays, wantStrays) {
		t.Errorf("Strays() = %v, want %v", strays, wantStrays)
	}
}
