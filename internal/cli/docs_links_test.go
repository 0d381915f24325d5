package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// slug is the anchor GitHub gives a heading: lower case, letters, digits,
// '-' and '_' kept, spaces made '-', everything else dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors is every heading anchor of the Markdown file at path, with
// GitHub's -1, -2 ... for a repeated heading; code blocks are skipped.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, seen := map[string]bool{}, map[string]int{}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		s := slug(strings.TrimLeft(line, "#"))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsAnchors: every link of README.md and docs/*.md to a Markdown
// file names one that exists, and its #anchor one of that file's headings
// (a renamed heading broke #metrics---metrics-file in two pages).
func TestDocsAnchors(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../README.md")
	cache := map[string]map[string]bool{}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: %v", page, target, err)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if cache[path] == nil {
				cache[path] = anchors(t, path)
			}
			if !cache[path][anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", page, target, path, anchor)
			}
		}
	}
}

// TestDocsJSONTable: the JSON output section's table names every command
// (what it prints, or that it prints no JSON), and every schema it links
// exists.
func TestDocsJSONTable(t *testing.T) {
	secs := readDocSections(t, cliDoc)
	text, _ := chapter(t, secs, "JSON output")
	var named []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		for _, m := range regexp.MustCompile("`([a-z-]+)[^`]*`").FindAllStringSubmatch(first, -1) {
			named = append(named, m[1])
		}
	}
	root := newRoot(&globals{})
	names := []string{"completion", "help"} // cobra's, made at run time
	for _, c := range commands(root) {
		names = append(names, c.Name())
	}
	for _, n := range names {
		if !slices.Contains(named, n) {
			t.Errorf("%s: the JSON output table does not name %q", cliDoc, n)
		}
	}
}
