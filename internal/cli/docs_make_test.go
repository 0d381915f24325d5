package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeScreen is how many lines of README.md a newcomer sees first.
const readmeScreen = 40

// TestDocsReadmeFirstScreen: README.md's first screen says what the
// project is in at most three lines, gives the two commands of a fresh
// machine (make demo, make test), and links on: install, on a node,
// testing, operations. The long story is in docs/testing.md.
func TestDocsReadmeFirstScreen(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	screen := strings.Join(lines[:min(readmeScreen, len(lines))], "\n")
	for _, want := range []string{"`make demo`", "`make test`", "](#install)", "](#on-a-node)", "](docs/testing.md)", "](docs/operations.md)"} {
		if !strings.Contains(screen, want) {
			t.Errorf("README.md's first %d lines lack %s", readmeScreen, want)
		}
	}
	// What it is: the lines between the title and the first section.
	what := 0
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if strings.TrimSpace(l) != "" {
			what++
		}
	}
	if what > 3 {
		t.Errorf("README.md says what it is in %d lines, want at most 3", what)
	}
	// The first screen ends with its links: the next section begins
	// within it.
	sections := 0
	for _, l := range lines[:min(readmeScreen, len(lines))] {
		if strings.HasPrefix(l, "## ") {
			sections++
		}
	}
	if sections < 2 {
		t.Errorf("README.md's first screen (Try it, its links) runs past line %d", readmeScreen)
	}
}

var (
	makeRule   = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	makeHelped = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):.*## `)
	makeNamed  = regexp.MustCompile("`make ([a-z][a-z0-9-]*)")
)

// TestDocsMakeTargets: every make target README.md and docs/*.md name is
// a rule of the Makefile, and docs/testing.md names every target make
// help lists, so a renamed or new target cannot leave the docs behind.
func TestDocsMakeTargets(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, m := range makeRule.FindAllStringSubmatch(string(mk), -1) {
		rules[m[1]] = true
	}
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, "../../README.md") {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range makeNamed.FindAllStringSubmatch(string(b), -1) {
			if !rules[m[1]] {
				t.Errorf("%s names `make %s`, which the Makefile has no rule for", page, m[1])
			}
		}
	}
	testing, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range makeHelped.FindAllStringSubmatch(string(mk), -1) {
		if !strings.Contains(string(testing), "`make "+m[1]+"`") {
			t.Errorf("docs/testing.md does not name `make %s` (make help lists it)", m[1])
		}
	}
}
