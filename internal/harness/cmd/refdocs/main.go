// Command refdocs writes the reference pages of the operator's two input
// files, docs/reference/node-state.md (nodestate.NodeState, read by init
// --state) and docs/reference/release.md (engine.Release, read by plan and
// run --to), from their Go types: every YAML field by walking the type with
// reflect, its description from the Go field's doc comment, and its type,
// whether it is required, its default and its accepted values from the
// page's table (nodestate_page.go, release_page.go). Each page shows the
// minimal and full example files of docs/reference/examples/, and each
// field its value in the full example.
//
// make docs runs it. Its test fails when a checked-in page differs from
// what it writes, and holds the tables and examples to what the real
// decoders do.
//
//	refdocs [-root DIR]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// specs is every reference page.
var specs = []spec{nodeStatePage, releasePage}

// render builds every page under root: the page's file name and its text.
func render(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, s := range specs {
		p, err := load(root, s)
		if err != nil {
			return nil, err
		}
		b, err := p.markdown()
		if err != nil {
			return nil, err
		}
		out[s.File] = b
	}
	return out, nil
}

func main() {
	root := flag.String("root", "", "the repository (default: the one this command was built from)")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "refdocs:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	if root == "" {
		var err error
		if root, err = build.RepoRoot(); err != nil {
			return err
		}
	}
	pages, err := render(root)
	if err != nil {
		return err
	}
	for _, s := range specs {
		path := filepath.Join(root, "docs", "reference", s.File)
		if err := os.WriteFile(path, pages[s.File], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
