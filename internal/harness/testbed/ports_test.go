package testbed

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsOutsideEphemeralRange pins why FreePorts exists: its ports
// are distinct, never handed out twice, bindable, and outside the range
// the kernel picks local ports of outgoing connections from.
func TestFreePortsOutsideEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for range 20 {
		ports, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if p < lo || p >= hi {
				t.Errorf("port %d is outside %d-%d", p, lo, hi)
			}
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	if err != nil {
		t.Fatalf("port %d is not free: %v", ports[0], err)
	}
	l.Close()
	ephemeral := probeEphemeral(t)
	if ephemeral >= lo && ephemeral < hi {
		t.Errorf("the kernel handed out %d for :0, inside FreePorts' range %d-%d", ephemeral, lo, hi)
	}
}

func probeEphemeral(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
