// Package kubeletrules pins the static pod rules of the product's
// kubeletpod.Check (kubeletpod/rules.go) on this module's real kubelet:
// each case of kubeletpod/testdata/kubelet-rules goes through kubelet's own
// file source (k8s.io/kubernetes/pkg/kubelet/config.NewSourceFile, as
// kubelet wires it), and what kubelet does with it must be what the case's
// first lines say for this kubelet's minor, the lines kubeletpod's own test
// holds Check to. So a rule of Check that kubelet does not follow fails
// here, on kubelet's code.
//
// This file is the same in every tool module that has the test (kubebuild's
// TestToolProgramsIdentical); source_test.go, the wiring of kubelet's file
// source, differs by minor as kubelet's API does.
//
//	cd internal/harness/tools/<module> && CGO_ENABLED=0 GOWORK=off go test -trimpath ./kubeletrules
package kubeletrules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// cases is the product's case directory, from this package's directory.
const cases = "../../../../../kubeletpod/testdata/kubelet-rules"

func TestKubeletRules(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(cases, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases in %s: %v", cases, err)
	}
	kube, err := kubernetesVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet's code of k8s.io/kubernetes %s", kube)
	parts := strings.SplitN(strings.TrimPrefix(kube, "v"), ".", 3)
	if len(parts) != 3 {
		t.Fatalf("k8s.io/kubernetes %s: no minor to read the cases' verdicts for", kube)
	}
	minor := parts[0] + "." + parts[1]
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			verdict, what, err := verdictFor(string(b), minor)
			if err != nil {
				t.Fatal(err)
			}
			pod, err := read(p, 30*time.Second)
			switch verdict {
			case "accepted":
				if err != nil {
					t.Fatalf("kubelet refuses it: %v", err)
				}
			case "refused":
				want := "static pods may not reference " + what
				if err == nil || !strings.HasSuffix(err.Error(), want) {
					t.Fatalf("kubelet: pod %v, error %v; want the error %q", pod != nil, err, want)
				}
				t.Logf("kubelet: %v", err)
			case "dropped":
				if err != nil {
					t.Fatalf("kubelet refuses it (want it run without %s): %v", what, err)
				}
				field := what[strings.LastIndex(what, ".")+1:]
				if !strings.Contains(string(b), field+":") {
					t.Fatalf("the case does not spell the field %s", field)
				}
				j, err := json.Marshal(pod)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(j), `"`+field+`"`) {
					t.Fatalf("kubelet kept the field %s: %s", what, j)
				}
			case "invalid":
				if err == nil || !strings.Contains(err.Error(), "invalid pod: ") || !strings.Contains(err.Error(), what+": ") {
					t.Fatalf("kubelet: pod %v, error %v; want its validation's error on %s", pod != nil, err, what)
				}
				t.Logf("kubelet: %v", err)
			default:
				t.Fatalf("verdict %q, want accepted, refused, invalid or dropped", verdict)
			}
		})
	}
}

// verdictFor is what the case file b says kubelet minor does with it: its
// first line, "# kubelet: <verdict> [<what>]", unless a line right after
// it, "# kubelet <minor>: <verdict> [<what>]", says otherwise for minor.
func verdictFor(b, minor string) (verdict, what string, err error) {
	lines := strings.Split(b, "\n")
	v, ok := strings.CutPrefix(lines[0], "# kubelet: ")
	if !ok {
		return "", "", fmt.Errorf("first line %q, want \"# kubelet: accepted|refused <resource>|invalid <field>|dropped <field>\"", lines[0])
	}
	for _, line := range lines[1:] {
		rest, ok := strings.CutPrefix(line, "# kubelet ")
		if !ok {
			break
		}
		if m, mv, ok := strings.Cut(rest, ": "); ok && m == minor {
			v = mv
		}
	}
	verdict, what, _ = strings.Cut(v, " ")
	return verdict, what, nil
}

// kubernetesVersion is the k8s.io/kubernetes this module requires (its
// go.mod, one directory up), the kubelet code this test runs: a test
// binary's build information does not list its dependencies.
func kubernetesVersion() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		return "", fmt.Errorf("this module's go.mod: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", errors.New("this module's go.mod requires no k8s.io/kubernetes")
}

// read starts kubelet's file source on the file at path and returns the
// pod of its first update, or the first error the source logs, or an
// error when neither came within timeout.
func read(path string, timeout time.Duration) (*v1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make(chan error, 1)
	updates, stop := fileSource(ctx, logr.New(errSink{errs}), path)
	defer stop()
	select {
	case u := <-updates:
		if u.Op != kubetypes.ADD || len(u.Pods) != 1 {
			return nil, fmt.Errorf("kubelet's file source sent op %v with %d pods first, want ADD of one", u.Op, len(u.Pods))
		}
		return u.Pods[0], nil
	case err := <-errs:
		return nil, err
	case <-ctx.Done():
		return nil, fmt.Errorf("kubelet's file source sent no update within %s", timeout)
	}
}

// errSink is the logger handed to the file source, which reports a
// manifest it cannot read only by logging it: a logged error is the
// refusal.
type errSink struct{ errs chan<- error }

func (errSink) Init(logr.RuntimeInfo)            {}
func (errSink) Enabled(int) bool                 { return false }
func (errSink) Info(int, string, ...any)         {}
func (s errSink) WithValues(...any) logr.LogSink { return s }
func (s errSink) WithName(string) logr.LogSink   { return s }

func (s errSink) Error(err error, msg string, kv ...any) {
	e := fmt.Errorf("%s %v", msg, kv)
	if err != nil {
		e = fmt.Errorf("%s %v: %w", msg, kv, err)
	}
	select {
	case s.errs <- e:
	default: // the first error is the one reported
	}
}
