package standin

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPortSharing: --permit-port-sharing sets SO_REUSEPORT on the listener,
// as k8s.io/apiserver's SecureServingOptions.ApplyTo does
// (options/serving.go: PermitPortSharing appends permitPortReuse, which
// serving_unix.go implements as setsockopt SO_REUSEPORT; SO_REUSEADDR is
// --permit-address-sharing's). Linux lets a second socket bind a port only
// when every socket on it set SO_REUSEPORT, so a surge instance shares the
// port with the old one only when both run with the flag.
func TestPortSharing(t *testing.T) {
	cases := []struct {
		name          string
		first, second []string
		shared        bool
	}{
		{"both with the flag", []string{"--permit-port-sharing"}, []string{"--permit-port-sharing=true"}, true},
		{"the old one without it", nil, []string{"--permit-port-sharing=true"}, false},
		{"the new one without it", []string{"--permit-port-sharing"}, nil, false},
		{"false is off", []string{"--permit-port-sharing=false"}, []string{"--permit-port-sharing=false"}, false},
		{"address sharing is not port sharing", []string{"--permit-address-sharing"}, []string{"--permit-address-sharing"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			old := startOn(t, "kube-apiserver", port, tc.first)
			old.waitCode(t, "/readyz", 200)
			surge := startOn(t, "kube-apiserver", port, tc.second)
			if !tc.shared {
				if code := surge.wait(t); code != 1 {
					t.Fatalf("second instance exit code %d, want 1 (listen failed)", code)
				}
				ev, err := ReadEvents(surge.events)
				if err != nil {
					t.Fatal(err)
				}
				if n := len(ev); n == 0 || ev[n-1].Event != EventExit || !strings.Contains(ev[n-1].Detail, "address already in use") {
					t.Fatalf("second instance events %+v, want an exit for EADDRINUSE", ev)
				}
				old.waitCode(t, "/readyz", 200)
				return
			}
			waitEvent(t, surge, EventListen)
			// The old one stops; the port keeps answering, from the new one.
			_ = old.cmd.Process.Signal(syscall.SIGTERM)
			if code := old.wait(t); code != 0 {
				t.Fatalf("old instance exit code %d after SIGTERM, want 0", code)
			}
			surge.waitCode(t, "/readyz", 200)
			select {
			case <-surge.done:
				t.Fatal("second instance exited")
			default:
			}
		})
	}
}

func TestParsePortSharing(t *testing.T) {
	for args, want := range map[string]bool{
		"":                             false,
		"--permit-port-sharing":        true,
		"--permit-port-sharing=true":   true,
		"--permit-port-sharing=1":      true,
		"--permit-port-sharing=false":  false,
		"--permit-address-sharing":     false,
		"--permit-port-sharing=true x": true, // a bool flag takes no separate value
	} {
		argv := append([]string{"kube-scheduler"}, strings.Fields(args)...)
		o, err := Parse(argv, func(string) string { return "" })
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if o.PermitPortSharing != want {
			t.Errorf("%q: PermitPortSharing %v, want %v", args, o.PermitPortSharing, want)
		}
	}
	if _, err := Parse([]string{"kube-scheduler", "--permit-port-sharing=maybe"}, func(string) string { return "" }); err == nil {
		t.Error("--permit-port-sharing=maybe: no error (pflag refuses a bool it cannot parse)")
	}
}

// waitEvent waits until p has recorded an event of kind.
func waitEvent(t *testing.T, p *proc, kind string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		ev, err := ReadEvents(p.events)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev {
			if e.Event == kind {
				return
			}
			if e.Event == EventExit {
				t.Fatalf("stand-in exited before %s: %+v", kind, ev)
			}
		}
		select {
		case <-p.done:
			t.Fatalf("stand-in exited before %s", kind)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %s event within 10s", kind)
}
