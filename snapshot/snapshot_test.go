package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// node is a manifest directory rendered from a testdata state, with every
// path it owns under one temp dir.
type node struct {
	st    *nodestate.NodeState
	store *manifest.Store
	root  string
}

func newNode(t *testing.T, state string) *node {
	t.Helper()
	root := t.TempDir()
	st, err := nodestate.Load(filepath.Join("..", "testdata", "states", state+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	st.ConfigDir = filepath.Join(root, "stratum")
	if st.Profile.Name == nodestate.ProfileCIS {
		for _, f := range []struct {
			dst *string
			src string
		}{{&st.Profile.AuditPolicyFile, "audit-policy.yaml"}, {&st.Profile.AdmissionConfigFile, "admission.yaml"}} {
			b, err := os.ReadFile(filepath.Join("..", "testdata", "profiles", f.src))
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, f.src)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			*f.dst = p
		}
	}
	store, err := manifest.Create(filepath.Join(root, "manifests"), manifest.Options{Scanner: proc.Host().Within(os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	return &node{st: st, store: store, root: root}
}

// files returns every file under dir (relative path -> content+mode).
func files(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, _ := os.ReadFile(p)
			fi, _ := os.Lstat(p)
			out[p] = fi.Mode().String() + "\n" + string(b)
			return nil
		})
	}
	return out
}

func TestTakeRestoreRoundTrip(t *testing.T) {
	for _, state := range []string{"default", "default-vip", "cis"} {
		t.Run(state, func(t *testing.T) {
			n := newNode(t, state)
			// A non-default mode must survive the round trip.
			os.Chmod(n.store.Path(nodestate.Scheduler), 0o640)
			before := files(t, n.store.Dir(), n.st.ConfigDir)
			dir := filepath.Join(n.root, "snaps", "txn1")
			ix, err := Take(dir, n.store, manifest.DerivedPaths(n.st))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(ix.Manifests()); got != len(manifest.NamesFor(n.st)) {
				t.Fatalf("snapshot holds %d manifests, want %d", got, len(manifest.NamesFor(n.st)))
			}
			// Break everything: edit, remove, add a leftover and a new component.
			os.WriteFile(n.store.Path(nodestate.Etcd), []byte("garbage"), 0o600)
			os.Chmod(n.store.Path(nodestate.Scheduler), 0o644) // the snapshot's mode must come back
			os.Remove(n.store.Path(nodestate.KubeAPIServer))
			os.WriteFile(filepath.Join(n.store.Dir(), "kube-scheduler.yaml.tmp"), []byte("x"), 0o600)
			for _, p := range manifest.DerivedPaths(n.st) {
				os.WriteFile(p, []byte("changed"), 0o644)
			}
			if _, err := Restore(dir, n.store, manifest.DerivedPaths(n.st)); err != nil {
				t.Fatal(err)
			}
			after := files(t, n.store.Dir(), n.st.ConfigDir)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("restore is not byte-for-byte with modes:\nbefore %v\nafter  %v", keys(before), keys(after))
			}
			// A second restore writes nothing.
			res, err := Restore(dir, n.store, manifest.DerivedPaths(n.st))
			if err != nil || len(res.Written)+len(res.Derived)+len(res.Removed) != 0 {
				t.Fatalf("second restore: %+v %v", res, err)
			}
			// A snapshot already there is not retaken.
			if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); !errors.Is(err, ErrExists) {
				t.Fatalf("retake: %v", err)
			}
		})
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRestoreRemovesComponentsTheSnapshotLacks(t *testing.T) {
	n := newNode(t, "default")
	dir := filepath.Join(n.root, "snaps", "t")
	if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); err != nil {
		t.Fatal(err)
	}
	vip := n.st.Clone()
	vip.VIP = &nodestate.VIP{Address: "10.0.0.100", Interface: "eth0"}
	vip.Images[nodestate.KubeVIP] = "ghcr.io/kube-vip/kube-vip:v0.8.9"
	if _, err := n.store.WriteAll(vip); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(dir, n.store, manifest.DerivedPaths(n.st))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Removed, []string{nodestate.KubeVIP}) {
		t.Fatalf("removed %v, want kube-vip", res.Removed)
	}
}

func TestStrayAndLeftoverStayOutOfSnapshot(t *testing.T) {
	n := newNode(t, "default")
	for _, f := range []string{"etcd.yaml.bak", "kube-apiserver.yaml.tmp", ".etcd.yaml999", "README"} {
		os.WriteFile(filepath.Join(n.store.Dir(), f), []byte("apiVersion: v1\nkind: Pod\n"), 0o600)
	}
	dir := filepath.Join(n.root, "snaps", "t")
	if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); err != nil {
		t.Fatal(err)
	}
	got := files(t, dir)
	if len(got) != 1+len(manifest.NamesFor(n.st)) {
		t.Fatalf("snapshot holds %v", keys(got))
	}
}

func TestTakeFailureLeavesNothing(t *testing.T) {
	n := newNode(t, "cis")
	snaps := filepath.Join(n.root, "snaps")
	dir := filepath.Join(snaps, "t")
	copyHook = func(name string) error {
		if name == "kube-controller-manager.yaml" {
			return errors.New("injected: disk full")
		}
		return nil
	}
	defer func() { copyHook = nil }()
	if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Take with a failing copy: %v", err)
	}
	if entries, _ := os.ReadDir(snaps); len(entries) != 0 {
		t.Fatalf("failed Take left %v", entries)
	}
	copyHook = nil
	// A read-only target: the parent cannot take the staging directory.
	ro := filepath.Join(n.root, "ro")
	os.Mkdir(ro, 0o500)
	if os.Geteuid() != 0 {
		if _, err := Take(filepath.Join(ro, "t"), n.store, nil); err == nil {
			t.Fatal("Take into a read-only dir succeeded")
		}
	}
	// A symlink where a manifest belongs fails the snapshot.
	os.Remove(n.store.Path(nodestate.Scheduler))
	os.Symlink("/etc/passwd", n.store.Path(nodestate.Scheduler))
	if _, err := Take(dir, n.store, nil); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Take with a symlinked manifest: %v", err)
	}
	if entries, _ := os.ReadDir(snaps); len(entries) != 0 {
		t.Fatalf("failed Take left %v", entries)
	}
}

func TestHostileSnapshotsAreRefusedWithNothingMoved(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string){
		"symlink manifest": func(t *testing.T, dir string) {
			p := filepath.Join(dir, "manifests", "etcd.yaml")
			os.Remove(p)
			os.Symlink("/etc/passwd", p)
		},
		"symlink stray": func(t *testing.T, dir string) {
			os.Symlink("/etc/passwd", filepath.Join(dir, "manifests", "x.yaml"))
		},
		"traversal name": func(t *testing.T, dir string) {
			editIndex(t, dir, func(ix *Index) { ix.Entries[0].Name = "../../etc/cron.d/evil" })
		},
		"name outside the roster": func(t *testing.T, dir string) {
			editIndex(t, dir, func(ix *Index) { ix.Entries[0].Name, ix.Entries[0].Component = "kube-proxy.yaml", "kube-proxy" })
		},
		"derived file aimed elsewhere": func(t *testing.T, dir string) {
			editIndex(t, dir, func(ix *Index) {
				for i := range ix.Entries {
					if ix.Entries[i].Kind == KindDerived {
						ix.Entries[i].LivePath = "/etc/shadow"
					}
				}
			})
		},
		"directory as file": func(t *testing.T, dir string) {
			p := filepath.Join(dir, "manifests", "kube-scheduler.yaml")
			os.Remove(p)
			os.Mkdir(p, 0o700)
		},
		"unparsable manifest": func(t *testing.T, dir string) {
			p := filepath.Join(dir, "manifests", "kube-scheduler.yaml")
			os.WriteFile(p, []byte("{{{"), 0o600)
			editIndex(t, dir, func(ix *Index) {
				for i := range ix.Entries {
					if ix.Entries[i].Component == "kube-scheduler" {
						ix.Entries[i].Size, ix.Entries[i].SHA256 = 3, sha("{{{")
					}
				}
			})
		},
		"pod of another component": func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, "manifests", "etcd.yaml"))
			os.WriteFile(filepath.Join(dir, "manifests", "kube-scheduler.yaml"), b, 0o600)
			editIndex(t, dir, func(ix *Index) {
				for i := range ix.Entries {
					if ix.Entries[i].Component == "kube-scheduler" {
						ix.Entries[i].Size, ix.Entries[i].SHA256 = int64(len(b)), sha(string(b))
					}
				}
			})
		},
		"missing file": func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "manifests", "kube-apiserver.yaml"))
		},
		"changed after snapshot": func(t *testing.T, dir string) {
			p := filepath.Join(dir, "manifests", "etcd.yaml")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, append(b, '\n'), 0o600)
		},
		"no index": func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, indexFile)) },
		"unknown index field": func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(dir, indexFile))
			os.WriteFile(filepath.Join(dir, indexFile), []byte(strings.Replace(string(b), "{", `{"extra": 1,`, 1)), 0o600)
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, "cis")
			dir := filepath.Join(n.root, "snaps", "t")
			if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); err != nil {
				t.Fatal(err)
			}
			spoil(t, dir)
			// The live set differs from the snapshot, so a restore that
			// moved anything would show.
			n.store.Put(nodestate.Etcd, []byte(strings.Replace(string(must(n.store.Read(nodestate.Etcd))), "3.5.35-0", "3.6.16-0", 1)))
			before := files(t, n.store.Dir(), n.st.ConfigDir)
			_, err := Restore(dir, n.store, manifest.DerivedPaths(n.st))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("hostile snapshot: %v, want ErrInvalid", err)
			}
			if after := files(t, n.store.Dir(), n.st.ConfigDir); !reflect.DeepEqual(before, after) {
				t.Fatal("a refused restore changed the live files")
			}
		})
	}
}

func TestStrayInSnapshotRestoresNowhere(t *testing.T) {
	n := newNode(t, "default")
	dir := filepath.Join(n.root, "snaps", "t")
	if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "manifests", "etcd.yaml.bak"), []byte("apiVersion: v1\nkind: Pod\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o600)
	res, err := Restore(dir, n.store, manifest.DerivedPaths(n.st))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Strays, []string{"manifests/etcd.yaml.bak", "notes.txt"}) {
		t.Fatalf("strays %v", res.Strays)
	}
	for _, f := range []string{"etcd.yaml.bak", "notes.txt"} {
		if _, err := os.Lstat(filepath.Join(n.store.Dir(), f)); err == nil {
			t.Fatalf("stray %s landed in the manifest dir", f)
		}
	}
}

func TestRetention(t *testing.T) {
	n := newNode(t, "default")
	r := NewRoot(filepath.Join(n.root, "snaps"), 2)
	ids := []string{"20261201T000000Z-a", "20261201T010000Z-b", "20261201T020000Z-c", "20261201T030000Z-d"}
	for _, id := range ids {
		if _, err := Take(r.Path(id), n.store, nil); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(r.EtcdPath(id), []byte("db"), 0o600)
	}
	removed, err := r.Prune(map[string]bool{ids[0]: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(removed, []string{ids[1], ids[2]}) {
		t.Fatalf("pruned %v", removed)
	}
	left, _ := r.List()
	if !reflect.DeepEqual(left, []string{ids[0], ids[3]}) {
		t.Fatalf("left %v", left)
	}
	if _, err := os.Stat(r.EtcdPath(ids[1])); err == nil {
		t.Fatal("etcd backup of a pruned snapshot kept")
	}
}

func editIndex(t *testing.T, dir string, fn func(*Index)) {
	t.Helper()
	p := filepath.Join(dir, indexFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var ix Index
	if err := jsonUnmarshal(b, &ix); err != nil {
		t.Fatal(err)
	}
	fn(&ix)
	out, _ := jsonMarshal(ix)
	os.WriteFile(p, out, 0o600)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

var jsonUnmarshal = json.Unmarshal

func jsonMarshal(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }

// A restore sweeps the live manifest directory through the store: an entry
// named like a staging leftover that is not a regular file (a directory, a
// symlink) is reported and left alone, and the restore completes.
func TestRestoreLeavesNonRegularLeftoversAsStrays(t *testing.T) {
	n := newNode(t, "default")
	dir := filepath.Join(n.root, "snaps", "t")
	if _, err := Take(dir, n.store, manifest.DerivedPaths(n.st)); err != nil {
		t.Fatal(err)
	}
	want := files(t, n.store.Dir())
	if _, err := n.store.Remove(nodestate.Scheduler); err != nil {
		t.Fatal(err)
	}
	live := n.store.Dir()
	strayDir := filepath.Join(live, "kube-apiserver.yaml.new")
	if err := os.Mkdir(strayDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(strayDir, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent", filepath.Join(live, "etcd.yaml.tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(live, "kube-scheduler.yaml.new"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(dir, n.store, manifest.DerivedPaths(n.st))
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if !reflect.DeepEqual(res.Swept, []string{"kube-scheduler.yaml.new"}) || !reflect.DeepEqual(res.Written, []string{nodestate.Scheduler}) {
		t.Errorf("swept %v, written %v", res.Swept, res.Written)
	}
	if !reflect.DeepEqual(res.ManifestStrays, []string{"etcd.yaml.tmp", "kube-apiserver.yaml.new"}) {
		t.Errorf("ManifestStrays = %v", res.ManifestStrays)
	}
	if _, err := os.Stat(filepath.Join(strayDir, "keep")); err != nil {
		t.Errorf("stray directory changed: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(live, "etcd.yaml.tmp")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("stray symlink changed: %v", err)
	}
	got := files(t, live)
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s not restored", p)
		}
	}
}

// pruneRoot is a snapshot root holding a snapshot and an etcd backup for
// each of ids.
func pruneRoot(t *testing.T, keep int, ids ...string) (*node, *Root) {
	t.Helper()
	n := newNode(t, "default")
	r := NewRoot(filepath.Join(n.root, "snaps"), keep)
	for _, id := range ids {
		if _, err := Take(r.Path(id), n.store, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.EtcdPath(id), []byte("db"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return n, r
}

func rootEntries(t *testing.T, r *Root) []string {
	t.Helper()
	entries, err := os.ReadDir(r.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// What a prune killed half-way left (by this binary: the snapshot renamed
// to its trash name, its etcd backup still there; by an older one: the
// etcd backup alone) is finished by the next Prune, and by CleanStaging;
// neither touches a protected id's snapshot or backup, nor a snapshot that
// still stands under its id.
func TestPruneFinishesAHalfDonePrune(t *testing.T) {
	ids := []string{"20261201T000000Z-000a", "20261201T010000Z-000b", "20261201T020000Z-000c", "20261201T030000Z-000d"}
	_, r := pruneRoot(t, 2, ids[0], ids[3])
	half := func(id string) { // killed after the rename
		t.Helper()
		if err := os.MkdirAll(filepath.Join(r.Dir(), "."+id+".staging-pruned", "manifests"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.EtcdPath(id), []byte("db"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	half(ids[1])
	// An older binary removed the snapshot, then was killed before its
	// etcd backup went.
	if err := os.WriteFile(r.EtcdPath(ids[2]), []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A protected id whose backup has no snapshot beside it is still kept.
	protected := "20261201T040000Z-000e"
	if err := os.WriteFile(r.EtcdPath(protected), []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := r.Prune(map[string]bool{ids[0]: true, protected: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 0 {
		t.Errorf("pruned %v: two snapshots stand, keep is 2", removed)
	}
	want := []string{ids[0], ids[0] + ".etcd.db", ids[3], ids[3] + ".etcd.db", protected + ".etcd.db"}
	sort.Strings(want)
	if got := rootEntries(t, r); !reflect.DeepEqual(got, want) {
		t.Errorf("after Prune the root holds %v, want %v", got, want)
	}

	// CleanStaging, run when any transaction takes its snapshot, finishes
	// a half-done prune of another id too.
	half(ids[1])
	if err := r.CleanStaging("20261201T050000Z-000f"); err != nil {
		t.Fatal(err)
	}
	if got := rootEntries(t, r); !reflect.DeepEqual(got, want) {
		t.Errorf("after CleanStaging the root holds %v, want %v", got, want)
	}
}

// A prune killed at each of its durable points (the fault seam pruneHook
// stops it there, as a SIGKILL would) never leaves a half snapshot under
// an id, and the next Prune finishes it: the trash and the etcd backup go,
// the protected snapshot and the newest stay.
func TestPruneKilledMidwayIsFinished(t *testing.T) {
	ids := []string{"20261201T000000Z-000a", "20261201T010000Z-000b", "20261201T020000Z-000c"}
	for _, step := range []string{"renamed", "etcd-removed"} {
		t.Run(step, func(t *testing.T) {
			_, r := pruneRoot(t, 2, ids...)
			killed := errors.New("killed")
			pruneHook = func(s, id string) error {
				if s == step && id == ids[1] {
					return killed
				}
				return nil
			}
			defer func() { pruneHook = nil }()
			if _, err := r.Prune(map[string]bool{ids[0]: true}); !errors.Is(err, killed) {
				t.Fatalf("Prune: %v, want it stopped at %s", err, step)
			}
			left := []string{"." + ids[1] + ".staging-pruned", ids[0], ids[0] + ".etcd.db", ids[2], ids[2] + ".etcd.db"}
			if step == "renamed" {
				left = append(left, ids[1]+".etcd.db")
			}
			sort.Strings(left)
			if got := rootEntries(t, r); !reflect.DeepEqual(got, left) {
				t.Fatalf("killed at %s, the root holds %v, want %v", step, got, left)
			}
			if got, _ := r.List(); !reflect.DeepEqual(got, []string{ids[0], ids[2]}) {
				t.Fatalf("List = %v: a half-pruned snapshot is listed", got)
			}
			pruneHook = nil
			if _, err := r.Prune(map[string]bool{ids[0]: true}); err != nil {
				t.Fatal(err)
			}
			want := []string{ids[0], ids[0] + ".etcd.db", ids[2], ids[2] + ".etcd.db"}
			if got := rootEntries(t, r); !reflect.DeepEqual(got, want) {
				t.Fatalf("after the next Prune the root holds %v, want %v", got, want)
			}
			if _, err := Load(r.Path(ids[0]), nil); err != nil {
				t.Fatalf("protected snapshot: %v", err)
			}
		})
	}
}
