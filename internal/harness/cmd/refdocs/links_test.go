package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var mdLink = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// headings is the anchor of every heading of a markdown page, code blocks
// left out.
func headings(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			out[anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
		}
	}
	return out
}

// Every relative link of the reference pages, and of the pages that link
// to them, leads to a file that exists and, with an anchor, to a heading of
// it: the pages link into cli.md and versions.md, which others edit.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages := []string{"README.md", "docs/cli.md"}
	for _, s := range specs {
		pages = append(pages, filepath.Join("docs", "reference", s.File))
	}
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, frag := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") {
				continue
			}
			isRef := strings.Contains(target, "reference/") || strings.HasPrefix(page, "docs/reference")
			if !isRef {
				continue // only the links this package's pages are part of
			}
			path := filepath.Join(root, filepath.Dir(page), target)
			if target == "" {
				path = filepath.Join(root, page)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", page, m[0], err)
				continue
			}
			if frag != "" && strings.HasSuffix(path, ".md") && !headings(t, path)[frag] {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", page, m[0], target, frag)
			}
		}
	}
}
