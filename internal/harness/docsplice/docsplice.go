// Package docsplice writes a generated section into a hand-written
// markdown file (docs/performance.md): the text between a begin and an end
// marker line is replaced, and the rest of the file is left as it is.
package docsplice

import "strings"

// Splice returns doc with the section from begin through end (and the
// newline after end) replaced by block, which carries its own markers. A
// document without both markers in order gets block appended after a blank
// line; an empty one becomes "# Performance" and block.
func Splice(doc, begin, end, block string) string {
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		if doc == "" {
			return "# Performance\n\n" + block
		}
		return strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	stop := j + len(end)
	if stop < len(doc) && doc[stop] == '\n' {
		stop++
	}
	return doc[:i] + block + doc[stop:]
}
