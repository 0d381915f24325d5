package runbin

import (
	"os/exec"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
		err    bool
	}{
		{"exit 0", 0, false},
		{"exit 3", 3, false},
		{"kill -KILL $$", -1, false},
		{"kill -TERM $$", -1, true},
	} {
		code, err := ExitCode(exec.Command("sh", "-c", c.script).Run())
		if code != c.want || (err != nil) != c.err {
			t.Errorf("sh -c %q: ExitCode = %d, %v; want %d, error %v", c.script, code, err, c.want, c.err)
		}
	}
	if code, err := ExitCode(exec.Command("/nonexistent/program").Run()); code != -1 || err == nil {
		t.Errorf("a program that did not start: ExitCode = %d, %v; want -1 and an error", code, err)
	}
}

func TestLastLines(t *testing.T) {
	if got := LastLines("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("LastLines = %q", got)
	}
	if got := LastLines("a\n", 5); got != "a" {
		t.Errorf("LastLines = %q", got)
	}
}
