package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// walkStep is one command of docs/walkthrough.md: a "$ " line of a
// console block, its exit code ("# exit N" at its end, else 0) and the
// output lines shown under it.
type walkStep struct {
	cmd  string
	exit int
	want []string
}

var exitComment = regexp.MustCompile(`\s# exit (\d+)$`)

// walkSteps parses the console blocks of the page at path.
func walkSteps(t *testing.T, path string) []walkStep {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var steps []walkStep
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "```console":
			in = true
		case in && line == "```":
			in = false
		case in && strings.HasPrefix(line, "$ "):
			s := walkStep{cmd: strings.TrimPrefix(line, "$ ")}
			if m := exitComment.FindStringSubmatch(s.cmd); m != nil {
				s.exit, _ = strconv.Atoi(m[1])
			}
			steps = append(steps, s)
		case in && len(steps) > 0 && line != "":
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	return steps
}

// shownLine is the pattern of an output line the page shows: the text
// itself, "..." any text, matched against a whole output line.
func shownLine(s string) *regexp.Regexp {
	parts := strings.Split(s, "...")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `.*`) + `$`)
}

// TestWalkthrough runs every command of docs/walkthrough.md in order, from
// the repository's root, in one shell environment carried from command to
// command, and checks each exit code and that the lines shown under it
// appear in its output (stdout and stderr), in that order. stratum-upgrade
// is this test binary (TestMain), with --proc-scope=self added so that a
// test bed of another test is never seen; mktemp makes its directory in
// the test's.
func TestWalkthrough(t *testing.T) {
	// The page's status shows kube-scheduler not answering on kubeadm's
	// port: held, as TestScripts holds it, from the test beds that bind it.
	testbed.HoldPorts(t, 5*time.Minute, 10257, 10259)
	su, err := exec.LookPath("stratum-upgrade")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\nexec " + strconv.Quote(su) + " \"$@\" --proc-scope=self\n"
	if err := os.WriteFile(filepath.Join(bin, "stratum-upgrade"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(tmp, "env.sh")
	if err := os.WriteFile(env, []byte("export PATH="+strconv.Quote(bin+":"+os.Getenv("PATH"))+
		" TMPDIR="+strconv.Quote(tmp)+" STRATUM_CONFIG=\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := walkSteps(t, filepath.Join(repo, "docs", "walkthrough.md"))
	if len(steps) < 10 {
		t.Fatalf("docs/walkthrough.md: %d commands; the page has more", len(steps))
	}
	for i, s := range steps {
		script := ". " + strconv.Quote(env) + "\n" + s.cmd + "\nrc=$?\nexport -p > " + strconv.Quote(env) + "\nexit $rc\n"
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = repo
		cmd.Env = []string{"HOME=" + tmp, "PATH=/usr/bin:/bin"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("command %d %q: %v", i+1, s.cmd, err)
		}
		if code != s.exit {
			t.Fatalf("command %d %q: exit %d, the page says %d; output:\n%s", i+1, s.cmd, code, s.exit, out.String())
		}
		lines := strings.Split(out.String(), "\n")
		for _, w := range s.want {
			re := shownLine(w)
			for len(lines) > 0 && !re.MatchString(lines[0]) {
				lines = lines[1:]
			}
			if len(lines) == 0 {
				t.Fatalf("command %d %q: the page shows\n\t%s\nwhich is not in its output (in the page's order):\n%s", i+1, s.cmd, w, out.String())
			}
			lines = lines[1:]
		}
	}
}
