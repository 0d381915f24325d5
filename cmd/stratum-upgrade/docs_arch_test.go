package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// archTables reads the two tables of "## Packages, one job each" in
// docs/architecture.md: the packages it names (first column of the "its one
// job" table) and, from the "imports" table, each package's imports within
// the module. Names are import paths below the module, without a trailing
// slash.
func archTables(t *testing.T) (documented map[string]bool, imports map[string][]string) {
	t.Helper()
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(root, "docs", "architecture.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Packages, one job each\n")
	if !ok {
		t.Fatalf("%s has no section \"## Packages, one job each\"", doc)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	tick := regexp.MustCompile("`([^`]+)`")
	names := func(cell string) []string {
		var out []string
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			out = append(out, strings.TrimSuffix(m[1], "/"))
		}
		return out
	}
	documented = map[string]bool{}
	imports = map[string][]string{}
	header := ""
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "|") {
			header = ""
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == "":
			header = strings.Join(cells[1:], "|")
		case strings.HasPrefix(cells[0], "---"):
		case header == "its one job":
			for _, n := range names(cells[0]) {
				documented[n] = true
			}
		case header == "imports" && len(cells) == 2:
			for _, n := range names(cells[0]) {
				imports[n] = names(cells[1])
			}
		}
	}
	if len(documented) == 0 || len(imports) == 0 {
		t.Fatalf("%s: found no package table (| package | its one job |) or no imports table (| package | imports |) under \"## Packages, one job each\"", doc)
	}
	return documented, imports
}

// moduleImports is every package of the module (go list ./...) with its
// imports within the module, names below the module path.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	graph := map[string][]string{}
	for _, field := range goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, "./...") {
		pkg, deps, _ := strings.Cut(field, ":")
		pkg = strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		var own []string
		for _, d := range strings.Split(deps, ",") {
			if rest, ok := strings.CutPrefix(d, module+"/"); ok {
				own = append(own, rest)
			}
		}
		slices.Sort(own)
		graph[pkg] = own
	}
	if len(graph) == 0 {
		t.Fatal("go list ./... listed no package")
	}
	return graph
}

// underAny reports whether pkg is one of dirs or below one.
func underAny(pkg string, dirs ...string) bool {
	for _, d := range dirs {
		if pkg == d || strings.HasPrefix(pkg, d+"/") {
			return true
		}
	}
	return false
}

// Every package of the module but the harness, e2e, bench, scripts and cmd is in
// the package table of docs/architecture.md. A row for a package that no
// longer exists is tolerated (it is stale, not wrong about what exists).
func TestDocsArchitecturePackages(t *testing.T) {
	documented, _ := archTables(t)
	for pkg := range moduleImports(t) {
		if underAny(pkg, "internal/harness", "e2e", "bench", "scripts", "cmd") {
			continue
		}
		if !documented[pkg] {
			t.Errorf("docs/architecture.md: package %s is not in the table under \"## Packages, one job each\"", pkg)
		}
	}
}

// The imports table of docs/architecture.md is the module's import graph:
// every package but the harness, e2e, bench and scripts has a row, and its row lists
// exactly the module packages it imports. A row, or an arrow, naming a
// package that no longer exists is tolerated.
func TestDocsArchitectureImports(t *testing.T) {
	_, imports := archTables(t)
	graph := moduleImports(t)
	for pkg, real := range graph {
		if underAny(pkg, "internal/harness", "e2e", "bench", "scripts") {
			continue
		}
		doc, ok := imports[pkg]
		if !ok {
			t.Errorf("docs/architecture.md: package %s has no row in the imports table", pkg)
			continue
		}
		for _, d := range real {
			if !slices.Contains(doc, d) {
				t.Errorf("docs/architecture.md: %s imports %s; its row in the imports table does not say so", pkg, d)
			}
		}
		for _, d := range doc {
			if _, exists := graph[d]; exists && !slices.Contains(real, d) {
				t.Errorf("docs/architecture.md: the imports table says %s imports %s; it does not", pkg, d)
			}
		}
	}
}
