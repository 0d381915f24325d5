package build

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toolModule writes a module with two main packages, one and two, each
// printing "tiny <version>" for --version, version set by -ldflags, and a
// third, three, that prints it only for `version` (as kubeadm does).
func toolModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"go.mod": "module example.com/tiny\n\ngo 1.26\n"}
	for _, name := range []string{"one", "two"} {
		files[name+"/main.go"] = "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nvar version = \"unset\"\n\n" +
			"func main() {\n\tif len(os.Args) > 1 && os.Args[1] == \"--version\" {\n\t\tfmt.Println(\"tiny \" + version)\n\t}\n}\n"
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	three := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nvar version = \"unset\"\n\n" +
		"func main() {\n\tif len(os.Args) > 1 && os.Args[1] == \"version\" {\n\t\tfmt.Println(\"tiny \" + version)\n\t\treturn\n\t}\n\tos.Exit(3)\n}\n"
	if err := os.MkdirAll(filepath.Join(dir, "three"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "three", "main.go"), []byte(three), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestToolVersionArgs(t *testing.T) {
	mod := toolModule(t)
	tool := Tool{
		Name: "tiny v3", Dir: filepath.Join(t.TempDir(), "tiny-v3"), ModuleDir: mod,
		Packages: []string{"./one", "./three"}, Binaries: []string{"one", "three"},
		LDFlags: "-X main.version=v3", Version: "tiny v3", Timeout: 2 * time.Minute,
	}
	// three exits 3 for --version: without VersionArgs the check refuses it.
	if _, err := tool.Build(context.Background()); err == nil || !strings.Contains(err.Error(), "three does not run (three --version)") {
		t.Fatalf("Build without VersionArgs = %v, want three refused for --version", err)
	}
	if ok, _ := tool.Built(); ok {
		t.Fatal("a refused build left its binaries in place")
	}
	tool.VersionArgs = map[string][]string{"three": {"version"}}
	if built, err := tool.Build(context.Background()); err != nil || !built {
		t.Fatalf("Build with VersionArgs = %v, %v", built, err)
	}
	out, err := exec.Command(tool.Paths()["three"], "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "tiny v3" {
		t.Fatalf("three version = %q, %v", out, err)
	}
}

func TestToolBuildsOnceInOneGoBuild(t *testing.T) {
	mod := toolModule(t)
	tool := Tool{
		Name: "tiny v1", Dir: filepath.Join(t.TempDir(), "tiny-v1"), ModuleDir: mod,
		Packages: []string{"example.com/tiny/one", "./two"}, Binaries: []string{"one", "two"},
		LDFlags: "-X main.version=v1", Version: "tiny v1", Timeout: 2 * time.Minute,
	}
	if ok, err := tool.Built(); ok || err != nil {
		t.Fatalf("Built before a build = %v, %v", ok, err)
	}
	built, err := tool.Build(context.Background())
	if err != nil || !built {
		t.Fatalf("Build = %v, %v", built, err)
	}
	for name, p := range tool.Paths() {
		out, err := exec.Command(p, "--version").Output()
		if err != nil || strings.TrimSpace(string(out)) != "tiny v1" {
			t.Fatalf("%s --version = %q, %v", name, out, err)
		}
	}
	if built, err := tool.Build(context.Background()); err != nil || built {
		t.Fatalf("second Build = %v, %v: want served from the cache", built, err)
	}
	left, _ := filepath.Glob(filepath.Join(tool.Dir, ".build-*"))
	if len(left) != 0 {
		t.Fatalf("temporary build directories left: %v", left)
	}
}

func TestToolVersionMismatchLeavesNothing(t *testing.T) {
	mod := toolModule(t)
	tool := Tool{
		Name: "tiny v2", Dir: filepath.Join(t.TempDir(), "tiny-v2"), ModuleDir: mod,
		Packages: []string{"./one"}, Binaries: []string{"renamed"},
		LDFlags: "-X main.version=v1", Version: "tiny v2", Timeout: 2 * time.Minute,
	}
	_, err := tool.Build(context.Background())
	if err == nil || !strings.Contains(err.Error(), `want "tiny v2"`) {
		t.Fatalf("Build with the wrong version = %v, want a version error", err)
	}
	entries, _ := os.ReadDir(tool.Dir)
	for _, e := range entries {
		if e.Name() != "build.lock" {
			t.Fatalf("left in %s after a failed build: %s", tool.Dir, e.Name())
		}
	}
}

func TestToolRejectsMisnamedBinaries(t *testing.T) {
	tool := Tool{Name: "x", Dir: t.TempDir(), Packages: []string{"./a", "./b"}, Binaries: []string{"a", "c"}, Timeout: time.Minute}
	if _, err := tool.Build(context.Background()); err == nil || !strings.Contains(err.Error(), "names") {
		t.Fatalf("Build = %v, want a naming error", err)
	}
}
