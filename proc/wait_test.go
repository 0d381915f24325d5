package proc

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWaitGone(t *testing.T) {
	ctx := context.Background()
	// Both ways of waiting between scans: pidfds on the live /proc, and
	// plain polling (what a procfs of another namespace gets).
	for _, tc := range []struct {
		label string
		s     func() *Scanner
	}{
		{"pidfd", self},
		{"polling", func() *Scanner { s := self(); s.live = false; return s }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			if tc.label == "pidfd" && !self().live {
				t.Fatal("the host scanner is not live: /proc/self does not name this process")
			}

			t.Run("exits on SIGTERM", func(t *testing.T) {
				name := uniqueName(t, "term")
				tg := Target{Name: "kube-scheduler", Binary: name}
				a := startHelper(t, name, "sleep")
				b := startHelper(t, name, "sleep")
				if err := a.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				errc := make(chan error, 1)
				go func() { errc <- tc.s().WaitGone(ctx, tg, 30*time.Second) }()
				time.Sleep(20 * time.Millisecond) // let the wait find b still running
				if err := b.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				// Neither is reaped: a zombie is gone.
				if err := <-errc; err != nil {
					t.Fatalf("WaitGone: %v", err)
				}
			})

			t.Run("ignores SIGTERM", func(t *testing.T) {
				name := uniqueName(t, "stubborn")
				tg := Target{Name: "kube-scheduler", Binary: name}
				cmd := startHelper(t, name, "ignoreterm")
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				err := tc.s().WaitGone(ctx, tg, 300*time.Millisecond)
				if err == nil {
					t.Fatal("WaitGone succeeded while the process runs")
				}
				for _, want := range []string{"waiting for kube-scheduler to exit", "timed out", "still running", "pid " + itoa(cmd.Process.Pid) + " (started at tick"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				if !isDeadline(err) {
					t.Errorf("error %q does not wrap context.DeadlineExceeded", err)
				}
			})
		})
	}

	t.Run("nothing running", func(t *testing.T) {
		if err := self().WaitGone(ctx, Target{Name: "x", Binary: uniqueName(t, "none")}, 0); err != nil {
			t.Fatalf("WaitGone with nothing running: %v", err)
		}
	})

	t.Run("unreadable table is not gone", func(t *testing.T) {
		root := fakeRoot(t, map[string]string{})
		s, err := NewScanner(root)
		if err != nil {
			t.Fatal(err)
		}
		s.root = root + "/missing"
		err = s.WaitGone(ctx, Target{Name: "etcd", Binary: "etcd"}, 100*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "waiting for etcd to exit") {
			t.Fatalf("WaitGone on an unreadable table: %v", err)
		}
	})
}
