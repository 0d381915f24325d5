// Command matrixsum reads `go test -json` output on stdin and prints one
// line per fault matrix: how many of its cases (leaf subtests) passed, for
// example
//
//	kill 43/43 reboot 73/73 ... io-errors 27/27 converged
//
// It exits 1 when a case failed or a matrix ran no case, so `make crash`
// fails with it. The test output itself goes to stderr, as it arrives.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// matrices maps a top-level test to the name of its matrix, in print order.
var matrices = []struct{ test, name string }{
	{"TestCrashMatrix", "kill"},
	{"TestRebootMatrix", "reboot"},
	{"TestMemMatrix", "kill+reboot(model)"},
	{"TestPowerLossMatrix", "power-loss"},
	{"TestPowerCutAtEveryIO", "power-cut-io"},
	{"TestIOErrorMatrix", "io-errors"},
}

type event struct {
	Action string
	Test   string
	Output string
}

type tally struct{ pass, fail, skip int }

func main() {
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr))
}

func run(in io.Reader, out, log io.Writer) int {
	// A leaf is a test no other test names as its parent.
	results := map[string]string{}
	parent := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			fmt.Fprintln(log, sc.Text())
			continue
		}
		if ev.Action == "output" {
			fmt.Fprint(log, ev.Output)
			continue
		}
		if ev.Test == "" {
			continue
		}
		if i := strings.LastIndex(ev.Test, "/"); i >= 0 {
			for p := ev.Test[:i]; ; {
				parent[p] = true
				j := strings.LastIndex(p, "/")
				if j < 0 {
					break
				}
				p = p[:j]
			}
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			results[ev.Test] = ev.Action
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(log, "matrixsum:", err)
		return 1
	}
	tallies := map[string]*tally{}
	for test, res := range results {
		if parent[test] {
			continue
		}
		top, _, _ := strings.Cut(test, "/")
		t := tallies[top]
		if t == nil {
			t = &tally{}
			tallies[top] = t
		}
		switch res {
		case "pass":
			t.pass++
		case "fail":
			t.fail++
		case "skip":
			t.skip++
		}
	}
	code := 0
	var parts []string
	for _, m := range matrices {
		t := tallies[m.test]
		if t == nil || t.pass+t.fail == 0 {
			parts = append(parts, m.name+" not-run")
			code = 1
			continue
		}
		p := fmt.Sprintf("%s %d/%d", m.name, t.pass, t.pass+t.fail)
		if t.skip > 0 {
			p += fmt.Sprintf(" (+%d skipped)", t.skip)
		}
		parts = append(parts, p)
		if t.fail > 0 {
			code = 1
		}
	}
	verdict := "converged"
	if code != 0 {
		verdict = "NOT converged"
	}
	fmt.Fprintln(out, strings.Join(parts, " "), verdict)
	return code
}
