package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFeatures: a flagdump's -features output is written under a
// header naming the version; a flagdump without -features (it prints its
// usage and exits 2) or one that prints no table is an error.
func TestWriteFeatures(t *testing.T) {
	dir := t.TempDir()
	var lines strings.Builder
	lines.WriteString("AllAlpha\t0.0=ALPHA\n")
	for i := range 120 {
		fmt.Fprintf(&lines, "Gate%03d\t1.%d=ALPHA\n", i, 30+i%8)
	}
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	table := filepath.Join(dir, "table")
	if err := os.WriteFile(table, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	good := script("good", `[ "$1" = -features ] && exec cat `+table+"\nexit 2\n")
	if err := writeFeatures(dir, "v1.37.2", "1.37", good); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kube-1.37.txt"))
	if err != nil {
		t.Fatal(err)
	}
	header, rest, _ := strings.Cut(string(b), "\n")
	if !strings.HasPrefix(header, "# ") || !strings.Contains(header, "v1.37.2") || rest != lines.String() {
		t.Errorf("kube-1.37.txt: header %q, and the table %v as printed", header, rest == lines.String())
	}
	if err := writeFeatures(dir, "v1.36.3", "1.36", script("old", "echo usage >&2\nexit 2\n")); err == nil {
		t.Error("a flagdump without -features wrote a table")
	}
	if err := writeFeatures(dir, "v1.36.3", "1.36", script("empty", "echo a\n")); err == nil {
		t.Error("an output with no gates was written as a table")
	}
}
