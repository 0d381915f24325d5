//go:build stratumfault

package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this binary was built with the stratumfault tag
// and so can arm points.
const Enabled = true

// EnvVar arms points in a binary built with the stratumfault tag: one point
// or several separated by commas, each optionally ending in "#N" to fire
// only at its N-th hit (1-based).
const EnvVar = "STRATUM_FAULT"

var (
	once  sync.Once
	armed map[Point]int // point -> hit number to fire at
	hits  map[Point]int
	mu    sync.Mutex
)

func load() {
	armed = map[Point]int{}
	hits = map[Point]int{}
	for _, p := range strings.Split(os.Getenv(EnvVar), ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		n := 1
		if name, num, ok := strings.Cut(p, "#"); ok {
			if v, err := strconv.Atoi(num); err == nil && v > 0 {
				p, n = name, v
			}
		}
		armed[Point(p)] = n
	}
}

// Hit marks that the caller reached point. If EnvVar arms it (and this is
// the armed hit), the process is SIGKILLed before Hit returns.
func Hit(point Point) {
	once.Do(load)
	if len(armed) == 0 {
		return
	}
	mu.Lock()
	want, ok := armed[point]
	hits[point]++
	n := hits[point]
	mu.Unlock()
	if !ok || n != want {
		return
	}
	fmt.Fprintf(os.Stderr, "stratum-upgrade: fault injection: SIGKILL at %s\n", point)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is delivered before this blocks for long
}
