// Package diff computes line diffs and formats them as unified diffs, the
// format of `diff -u` and `git diff`, so that `stratum-upgrade plan` shows
// exactly what a release would change in each manifest.
//
// The edit script is a shortest one (Myers' O(ND) algorithm): every line
// reported as removed or added is one that no longer-common subsequence
// keeps. Lines are compared byte for byte including their terminating
// newline, so a last line without a newline differs from the same line with
// one, and the output marks it with "\ No newline at end of file" as GNU
// diff does; `patch` applies the output.
package diff

import (
	"fmt"
	"strings"
)

// Op is the kind of one Edit.
type Op int

// Edit operations.
const (
	// Equal: the line is in both inputs.
	Equal Op = iota
	// Delete: the line is only in the first input.
	Delete
	// Insert: the line is only in the second input.
	Insert
)

// Edit is one line of an edit script. A and B are the 0-based indexes of
// the line in the first and second input; for an Insert, A is the number of
// lines of the first input before it, and for a Delete, B is the number of
// lines of the second input before it.
type Edit struct {
	Op   Op
	A, B int
}

// Lines splits b into lines, each keeping its terminating "\n"; a last line
// without one is returned as is. An empty input has no lines.
func Lines(b []byte) []string {
	var out []string
	s := string(b)
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// Edits returns a shortest edit script turning a into b: every line of a
// and of b appears exactly once, in order, as Equal (both), Delete (a only)
// or Insert (b only). Within a run of changes, deletions come before
// insertions.
func Edits(a, b []string) []Edit {
	// Trim the common prefix and suffix: manifests differ in a few lines.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	mid := myers(a[pre:len(a)-suf], b[pre:len(b)-suf])
	out := make([]Edit, 0, pre+len(mid)+suf)
	for i := 0; i < pre; i++ {
		out = append(out, Edit{Equal, i, i})
	}
	for _, e := range mid {
		out = append(out, Edit{e.Op, e.A + pre, e.B + pre})
	}
	for i := 0; i < suf; i++ {
		out = append(out, Edit{Equal, len(a) - suf + i, len(b) - suf + i})
	}
	return normalize(out)
}

// myers is Myers' greedy shortest-edit-script algorithm. trace[d] keeps the
// furthest-reaching x of each diagonal k in [-d, d] after step d, which is
// all the backtrack needs: memory O(D^2), not O(D(N+M)).
func myers(a, b []string) []Edit {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return nil
	}
	maxD := n + m
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down: an insertion
			} else {
				x = v[off+k-1] + 1 // right: a deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				trace = append(trace, append([]int(nil), v[off-d:off+d+1]...))
				return backtrack(trace, n, m)
			}
		}
		trace = append(trace, append([]int(nil), v[off-d:off+d+1]...))
	}
	panic("diff: unreachable: no edit script within n+m steps")
}

// backtrack walks trace from (n, m) back to (0, 0) and returns the edits in
// order.
func backtrack(trace [][]int, n, m int) []Edit {
	// at returns trace[d]'s x on diagonal k, with -d <= k <= d.
	at := func(d, k int) int { return trace[d][k+d] }
	var rev []Edit
	x, y := n, m
	for d := len(trace) - 1; d > 0; d-- {
		k := x - y
		var prevK int
		if k == -d || (k != d && at(d-1, k-1) < at(d-1, k+1)) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := at(d-1, prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, Edit{Equal, x, y})
		}
		if x == prevX {
			y--
			rev = append(rev, Edit{Insert, x, y})
		} else {
			x--
			rev = append(rev, Edit{Delete, x, y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, Edit{Equal, x, y})
	}
	out := make([]Edit, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}

// normalize orders each run of changes deletions first, as diff -u prints
// them, fixing up the A/B positions of the moved edits.
func normalize(es []Edit) []Edit {
	out := make([]Edit, 0, len(es))
	for i := 0; i < len(es); {
		if es[i].Op == Equal {
			out = append(out, es[i])
			i++
			continue
		}
		j := i
		var dels, ins []Edit
		for j < len(es) && es[j].Op != Equal {
			if es[j].Op == Delete {
				dels = append(dels, es[j])
			} else {
				ins = append(ins, es[j])
			}
			j++
		}
		// Positions at the start of the run.
		a0, b0 := es[i].A, es[i].B
		for n := range dels {
			out = append(out, Edit{Delete, a0 + n, b0})
		}
		for n := range ins {
			out = append(out, Edit{Insert, a0 + len(dels), b0 + n})
		}
		i = j
	}
	return out
}

// Unified returns the unified diff turning a into b with context lines of
// context around each change, headed "--- fromName" and "+++ toName"; ""
// when a and b are equal. Hunks whose contexts overlap or touch are merged,
// as diff -u does. A negative context counts as 0.
func Unified(fromName, toName string, a, b []byte, context int) string {
	if context < 0 {
		context = 0
	}
	la, lb := Lines(a), Lines(b)
	es := Edits(la, lb)
	hunks := group(es, context)
	if len(hunks) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromName, toName)
	for _, h := range hunks {
		var na, nb int
		for _, e := range h {
			if e.Op != Insert {
				na++
			}
			if e.Op != Delete {
				nb++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(h[0].A, na), hunkRange(h[0].B, nb))
		for _, e := range h {
			switch e.Op {
			case Equal:
				writeLine(&sb, ' ', la[e.A])
			case Delete:
				writeLine(&sb, '-', la[e.A])
			case Insert:
				writeLine(&sb, '+', lb[e.B])
			}
		}
	}
	return sb.String()
}

// hunkRange formats one side of a hunk header: start is the number of lines
// before the hunk. GNU diff prints "l" for one line, "l,n" for n lines from
// line l, and "p,0" for an empty range after line p.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func writeLine(sb *strings.Builder, prefix byte, line string) {
	sb.WriteByte(prefix)
	sb.WriteString(line)
	if !strings.HasSuffix(line, "\n") {
		sb.WriteString("\n\\ No newline at end of file\n")
	}
}

// group splits es into hunks: each change with up to context equal lines on
// either side, runs closer than 2*context+1 equal lines merged.
func group(es []Edit, context int) [][]Edit {
	var hunks [][]Edit
	i := 0
	for i < len(es) {
		if es[i].Op == Equal {
			i++
			continue
		}
		start := max(0, i-context)
		end := i
		for {
			for end < len(es) && es[end].Op != Equal {
				end++
			}
			run := 0
			for end+run < len(es) && es[end+run].Op == Equal {
				run++
			}
			if end+run == len(es) || run > 2*context {
				end += min(run, context)
				break
			}
			end += run
		}
		hunks = append(hunks, es[start:end])
		i = end
	}
	return hunks
}
