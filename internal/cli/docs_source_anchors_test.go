package cli

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var sourceDocLink = regexp.MustCompile(`docs/([A-Za-z0-9_-]+\.md)#([A-Za-z0-9_-]+)`)

// TestSourceDocsAnchors: every "docs/X.md#anchor" a message or comment in
// the module's Go source cites names a page that exists and one of its
// headings. TestDocsAnchors checks the links in the docs; messages point
// an operator at the docs for the long story, and a renamed heading must
// not leave them pointing nowhere.
func TestSourceDocsAnchors(t *testing.T) {
	cache := map[string]map[string]bool{}
	cited := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "../.." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range sourceDocLink.FindAllStringSubmatch(string(b), -1) {
			cited++
			page := filepath.Join("../../docs", m[1])
			if _, err := os.Stat(page); err != nil {
				t.Errorf("%s cites %s: %v", path, m[0], err)
				continue
			}
			if cache[page] == nil {
				cache[page] = anchors(t, page)
			}
			if !cache[page][m[2]] {
				t.Errorf("%s cites %s: %s has no heading with anchor #%s", path, m[0], page, m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited == 0 {
		t.Error("no Go source cites a docs anchor: the scan found nothing to check")
	}
}
