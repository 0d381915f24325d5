// Command slowest passes go test's output through as it arrives and, at
// its end, prints the slowest packages with their times, so that make test
// shows where its minutes went:
//
//	slowest packages:
//	  312.4s  github.com/ciq/stratum-upgrade/engine
//
// It reads the package result lines ("ok  pkg 12.3s", "FAIL pkg 4.5s") and
// always exits 0: make test's status is go test's (bash's pipefail).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is a package result line of go test: status, package, seconds.
var result = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s+([0-9.]+)s\b`)

type pkgTime struct {
	status, pkg string
	secs        float64
}

func main() {
	n := flag.Int("n", 5, "how many packages to print")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *n); err != nil {
		fmt.Fprintln(os.Stderr, "slowest:", err)
	}
}

// run copies in to out line by line, then writes the n slowest packages.
func run(in io.Reader, out io.Writer, n int) error {
	r := bufio.NewReader(in)
	var times []pkgTime
	var last string
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			last = line
			if _, werr := io.WriteString(out, line); werr != nil {
				return werr
			}
			if m := result.FindStringSubmatch(line); m != nil {
				secs, _ := strconv.ParseFloat(m[3], 64)
				times = append(times, pkgTime{m[1], m[2], secs})
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading go test's output: %w", err)
		}
	}
	if len(times) == 0 {
		return nil
	}
	if !strings.HasSuffix(last, "\n") {
		fmt.Fprintln(out)
	}
	slices.SortStableFunc(times, func(a, b pkgTime) int { return -cmpFloat(a.secs, b.secs) })
	fmt.Fprintln(out, "slowest packages:")
	for _, p := range times[:min(n, len(times))] {
		mark := ""
		if p.status == "FAIL" {
			mark = " (FAIL)"
		}
		fmt.Fprintf(out, "  %6.1fs  %s%s\n", p.secs, p.pkg, mark)
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
