package resolve

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modulePath is this module's import path.
const modulePath = "github.com/ciq/stratum-upgrade"

// sourceFiles parses every non-test Go file of the module (nested modules
// and testdata left out), keyed by its slash path from the module root.
func sourceFiles(t *testing.T) (map[string]*ast.File, *token.FileSet) {
	t.Helper()
	root := ".."
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files under the module root: not the module", len(files))
	}
	return files, fset
}

// TestOnePlaceReadsTags: no package but resolve calls ImageTag (reads an
// image's tag) or imports kubeadm's table; every other caller asks resolve.
func TestOnePlaceReadsTags(t *testing.T) {
	files, fset := sourceFiles(t)
	inResolve := func(path string) bool { return strings.HasPrefix(path, "resolve/") }
	calls := 0
	for path, f := range files {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == modulePath+"/versions/kubeadm" && !inResolve(path) {
				t.Errorf("%s imports versions/kubeadm: read kubeadm's table through package resolve", path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name := ""
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			if name == "ImageTag" {
				calls++
				if !inResolve(path) {
					t.Errorf("%s calls ImageTag: ask package resolve for the version or image instead", fset.Position(call.Pos()))
				}
			}
			return true
		})
	}
	if calls == 0 {
		t.Error("no call of ImageTag found at all: the check looks at nothing")
	}
}

// TestNodestateImportsNothingAbove: nodestate imports only the standard
// library, third-party packages and this module's durable.
func TestNodestateImportsNothingAbove(t *testing.T) {
	n := 0
	files, _ := sourceFiles(t)
	for path, f := range files {
		if filepath.Dir(path) != "nodestate" {
			continue
		}
		n++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, modulePath+"/") && p != modulePath+"/durable" {
				t.Errorf("%s imports %s: nodestate may import only the standard library, third-party packages and durable", path, p)
			}
		}
	}
	if n == 0 {
		t.Fatal("no nodestate source found")
	}
}
