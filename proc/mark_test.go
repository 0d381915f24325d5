package proc

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseUptime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"12345.67 999.00\n", 1234567, true},
		{"0.00 0.00\n", 0, true},
		{"5.6 1.0", 560, true},   // one decimal is tenths
		{"5.678 1.0", 567, true}, // floored, not rounded
		{"7 1", 700, true},       // no decimals
		{"", 0, false},           // empty
		{"abc.12 1", 0, false},   // not a number
		{"1.x2 1", 0, false},     // not a fraction
		{"-1.00 1", 0, false},    // negative
		{"1.00\n", 100, true},    // only one field
		{"   3.14   2.71\n", 314, true},
	} {
		got, err := parseUptime([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseUptime(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestMarkFakeRoot(t *testing.T) {
	s, err := NewScanner(fakeRoot(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}
	want := Mark{Ticks: 1234567, BootID: "11111111-2222-3333-4444-555555555555"}
	if m != want {
		t.Fatalf("Mark = %+v, want %+v", m, want)
	}
	b, _ := json.Marshal(m)
	if string(b) != `{"ticks":1234567,"bootID":"11111111-2222-3333-4444-555555555555"}` {
		t.Fatalf("Mark JSON = %s", b)
	}

	for _, tc := range []struct {
		label string
		files map[string]string
	}{
		{"empty boot id", map[string]string{"sys/kernel/random/boot_id": "\n"}},
		{"garbled uptime", map[string]string{"uptime": "soon\n"}},
	} {
		if _, err := NewScanner(fakeRoot(t, tc.files)); err == nil {
			t.Errorf("%s: NewScanner accepted it", tc.label)
		}
	}
	root := fakeRoot(t, nil)
	s, err = NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(root + "/sys/kernel/random/boot_id"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mark(); err == nil || !strings.Contains(err.Error(), "boot id") {
		t.Fatalf("Mark without a boot id: %v", err)
	}
}

func TestMarkOrdersWithStartTicks(t *testing.T) {
	before, err := MarkNow()
	if err != nil {
		t.Fatal(err)
	}
	cmd := startHelper(t, uniqueName(t, "ordered"), "sleep")
	after, err := MarkNow()
	if err != nil {
		t.Fatal(err)
	}
	ticks, alive, err := self().StartTicks(cmd.Process.Pid)
	if err != nil || !alive {
		t.Fatal(alive, err)
	}
	// Same clock, same unit: a process started between two marks has
	// start ticks between them.
	if ticks < before.Ticks || ticks > after.Ticks {
		t.Fatalf("start ticks %d outside marks [%d, %d]", ticks, before.Ticks, after.Ticks)
	}
	id, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if before.BootID != strings.TrimSpace(string(id)) {
		t.Fatalf("boot id %q, /proc says %q", before.BootID, id)
	}
}

func TestReplaced(t *testing.T) {
	name := uniqueName(t, "replaced")
	tg := Target{Name: "kube-scheduler", Binary: name}
	s := self()
	now, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}

	done, stale, err := s.Replaced(tg, now)
	if err != nil || done || len(stale) != 0 {
		t.Fatalf("nothing running: done=%v stale=%v err=%v; want not done", done, stale, err)
	}

	cmd := startHelper(t, name, "sleep")
	ticks, _, err := s.StartTicks(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	p := Process{PID: cmd.Process.Pid, StartTicks: ticks}

	for _, tc := range []struct {
		label     string
		mark      Mark
		done      bool
		stale     []Process
		wantError bool
	}{
		{"mark's own tick counts as before", Mark{ticks, now.BootID}, false, []Process{p}, false},
		{"mark after start", Mark{ticks + 1, now.BootID}, false, []Process{p}, false},
		{"mark one tick before start", Mark{ticks - 1, now.BootID}, true, nil, false},
		{"mark at tick 0", Mark{0, now.BootID}, true, nil, false},
		{"mark from another boot", Mark{math.MaxUint64, "another-boot"}, true, nil, false},
		{"mark without boot id", Mark{0, ""}, false, nil, true},
	} {
		done, stale, err := s.Replaced(tg, tc.mark)
		if (err != nil) != tc.wantError || done != tc.done || !slices.Equal(stale, tc.stale) {
			t.Errorf("%s: done=%v stale=%v err=%v; want done=%v stale=%v error=%v",
				tc.label, done, stale, err, tc.done, tc.stale, tc.wantError)
		}
	}
}

func TestWaitReplaced(t *testing.T) {
	ctx := context.Background()

	t.Run("restarted after the mark", func(t *testing.T) {
		name := uniqueName(t, "restart")
		tg := Target{Name: "kube-scheduler", Binary: name}
		old := startHelper(t, name, "sleep")
		m, err := self().Mark()
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- self().WaitReplaced(ctx, tg, m, 30*time.Second) }()

		// The stand-in for kubelet: take the old one down, start anew in a
		// later tick than the mark (a start in the mark's tick is stale).
		_ = old.Process.Kill()
		_ = old.Wait()
		waitTickAfter(t, m)
		startHelper(t, name, "sleep")
		if err := <-errc; err != nil {
			t.Fatalf("WaitReplaced: %v", err)
		}
	})

	t.Run("not restarted", func(t *testing.T) {
		name := uniqueName(t, "stale")
		tg := Target{Name: "kube-scheduler", Binary: name}
		old := startHelper(t, name, "sleep")
		m, err := self().Mark()
		if err != nil {
			t.Fatal(err)
		}
		err = self().WaitReplaced(ctx, tg, m, 300*time.Millisecond)
		if err == nil {
			t.Fatal("WaitReplaced succeeded with only the old process running")
		}
		for _, want := range []string{"kubelet did not start a new kube-scheduler within 300ms of its manifest being written (still running: pid " + itoa(old.Process.Pid) + ", started before the write); check kubelet's log (journalctl -u kubelet)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if !isDeadline(err) {
			t.Errorf("error %q does not wrap context.DeadlineExceeded", err)
		}
	})

	t.Run("nothing running", func(t *testing.T) {
		tg := Target{Name: "kube-scheduler", Binary: uniqueName(t, "none")}
		m, err := self().Mark()
		if err != nil {
			t.Fatal(err)
		}
		err = self().WaitReplaced(ctx, tg, m, 100*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "no process of "+tg.Binary+" is running") {
			t.Fatalf("WaitReplaced with nothing running: %v", err)
		}
	})

	t.Run("boot id changed", func(t *testing.T) {
		name := uniqueName(t, "reboot")
		tg := Target{Name: "kube-scheduler", Binary: name}
		startHelper(t, name, "sleep")
		m := Mark{Ticks: math.MaxUint64, BootID: "a-boot-long-ago"}
		// A zero timeout allows a single check: it must pass at once.
		if err := self().WaitReplaced(ctx, tg, m, 0); err != nil {
			t.Fatalf("WaitReplaced across a reboot: %v", err)
		}
	})

	t.Run("mark without boot id", func(t *testing.T) {
		err := self().WaitReplaced(ctx, Target{Name: "x", Binary: "x"}, Mark{}, time.Second)
		if err == nil || !strings.Contains(err.Error(), "boot id") {
			t.Fatalf("WaitReplaced(zero mark): %v", err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		name := uniqueName(t, "cancel")
		startHelper(t, name, "sleep")
		m, err := self().Mark()
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err = self().WaitReplaced(cctx, Target{Name: "c", Binary: name}, m, time.Minute)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped waiting for kubelet to start a new c after ") || !strings.Contains(err.Error(), " (last seen: ") {
			t.Fatalf("WaitReplaced cancelled: %v", err)
		}
	})
}

// waitTickAfter waits until the node's clock is past m's tick, so that a
// process started next starts after m.
func waitTickAfter(t *testing.T, m Mark) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		now, err := MarkNow()
		if err != nil {
			t.Fatal(err)
		}
		if now.Ticks > m.Ticks {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("clock did not pass tick %d", m.Ticks)
}

func TestWithBootIDMakesEveryProcessNew(t *testing.T) {
	name := uniqueName(t, "reboot")
	startHelper(t, name, "sleep")
	s := self()
	m, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}
	tg := Target{Name: name, Binary: name}
	if done, stale, err := s.Replaced(tg, m); err != nil || done || len(stale) != 1 {
		t.Fatalf("before the simulated reboot: done %v stale %v err %v", done, stale, err)
	}
	rebooted := s.WithBootID("00000000-0000-0000-0000-00000000beef")
	m2, err := rebooted.Mark()
	if err != nil || m2.BootID != "00000000-0000-0000-0000-00000000beef" {
		t.Fatalf("Mark after WithBootID: %+v %v", m2, err)
	}
	// The mark was taken in "another boot": the process that predates it
	// counts as new.
	if done, stale, err := rebooted.Replaced(tg, m); err != nil || !done || len(stale) != 0 {
		t.Fatalf("after the simulated reboot: done %v stale %v err %v", done, stale, err)
	}
}

func TestPastMark(t *testing.T) {
	s := self()
	m, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PastMark(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	now, _ := s.Mark()
	if now.Ticks <= m.Ticks {
		t.Fatalf("PastMark returned at tick %d, not past the mark's %d", now.Ticks, m.Ticks)
	}
	// A process started now counts as after the mark.
	name := uniqueName(t, "pastmark")
	startHelper(t, name, "sleep")
	if done, stale, err := s.Replaced(Target{Name: name, Binary: name}, m); err != nil || !done {
		t.Fatalf("process started after PastMark: done %v stale %v err %v", done, stale, err)
	}
}
