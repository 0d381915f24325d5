package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The checked-in pages are what refdocs writes from the Go types, their
// comments, the tables and the examples.
func TestPagesUpToDate(t *testing.T) {
	root := repoRoot(t)
	pages, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		path := filepath.Join("docs", "reference", s.File)
		have, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%v: run make docs", err)
			continue
		}
		if want := pages[s.File]; string(have) != string(want) {
			t.Errorf("%s is not what refdocs writes from the Go types, their comments and the examples "+
				"(first difference at line %d: %q, want %q): run make docs",
				path, firstDiff(string(have), string(want))+1, lineAt(string(have), firstDiff(string(have), string(want))),
				lineAt(string(want), firstDiff(string(have), string(want))))
		}
	}
}

// firstDiff is the index of the first line in which a and b differ.
func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i
		}
	}
	return min(len(al), len(bl))
}

func lineAt(s string, i int) string {
	lines := strings.Split(s, "\n")
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

// A field the table leaves out, or an entry for a field the type does not
// have, or an optional field without a default, stops the generator, naming
// the field.
func TestIncompleteTableRefused(t *testing.T) {
	root := repoRoot(t)
	cases := []struct {
		name string
		edit func(map[string]info)
		want string
	}{
		{"field left out", func(m map[string]info) { delete(m, "etcd.dataDir") }, "field etcd.dataDir (EtcdMember.DataDir) has no entry"},
		{"no such field", func(m map[string]info) { m["etcd.dataDirs"] = info{Required: "no", Default: "x", Values: "x"} }, "entry for etcd.dataDirs"},
		{"optional without default", func(m map[string]info) { m["pkiDir"] = info{Required: "no", Values: "x"} }, "field pkiDir: optional, so say what happens"},
		{"required with default", func(m map[string]info) { m["nodeName"] = info{Required: "yes", Default: "x", Values: "x"} }, "field nodeName: required, so it has no default"},
		{"no values", func(m map[string]info) { m["configDir"] = info{Required: "no", Default: "x"} }, "field configDir: say which values"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := nodeStatePage
			s.Fields = map[string]info{}
			for k, v := range nodeStatePage.Fields {
				s.Fields[k] = v
			}
			c.edit(s.Fields)
			_, err := load(root, s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// A full example that leaves a field out stops the generator: the page's
// example of that field would be missing.
func TestFullExampleMustSetEveryField(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "docs", "reference", "examples")
	if err := os.MkdirAll(ex, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{nodeStatePage.Minimal, nodeStatePage.Full} {
		b, err := os.ReadFile(filepath.Join(root, "docs", "reference", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if name == nodeStatePage.Full {
			b = []byte(strings.Replace(string(b), "  etcdMetrics: 2381\n", "", 1))
		}
		if err := os.WriteFile(filepath.Join(ex, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "nodestate"), filepath.Join(dir, "nodestate")); err != nil {
		t.Fatal(err)
	}
	_, err := load(dir, nodeStatePage)
	if want := "does not set ports.etcdMetrics"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("load: %v, want an error containing %q", err, want)
	}
}

func TestOperatorDoc(t *testing.T) {
	for _, c := range []struct{ goName, path, doc, want string }{
		{"EtcdMember.DataDir", "etcd.dataDir", "DataDir is etcd's data directory.", "`etcd.dataDir` is etcd's data directory."},
		{"VIP.Address", "vip.address", "The virtual IP.", "The virtual IP."},
		{"NodeState.Kind", "kind", "Kinds are", "Kinds are"},
	} {
		if got := operatorDoc(field{GoName: c.goName, Path: c.path, Doc: c.doc}); got != c.want {
			t.Errorf("operatorDoc(%s, %q) = %q, want %q", c.goName, c.doc, got, c.want)
		}
	}
}

func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"etcd.dataDir":                  "etcddatadir",
		"Minimal example":               "minimal-example",
		"`init --state FILE [--force]`": "init---state-file---force",
		"extraArgs":                     "extraargs",
	} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}
