package main

import (
	"strings"
	"testing"
)

// TestRun: every line passes through unchanged, failures included, and
// the n slowest packages follow, slowest first, a failed one marked.
func TestRun(t *testing.T) {
	in := `ok  	example.com/a	12.5s
--- FAIL: TestX (1.00s)
    x_test.go:3: boom
FAIL
FAIL	example.com/b	301.2s
ok  	example.com/c	0.004s
?   	example.com/d	[no test files]
ok  	example.com/e	45.0s
no newline at the end`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, 2); err != nil {
		t.Fatal(err)
	}
	want := in + "\n" + `slowest packages:
   301.2s  example.com/b (FAIL)
    45.0s  example.com/e
`
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestRunNoPackages: without a result line (go test failed to build, say)
// the output is passed through and nothing is added.
func TestRunNoPackages(t *testing.T) {
	in := "# example.com/a\na.go:1: syntax error\n"
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, 5); err != nil {
		t.Fatal(err)
	}
	if out.String() != in {
		t.Errorf("output %q, want %q", out.String(), in)
	}
}
