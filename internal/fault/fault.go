// Package fault holds the crash-injection points of the upgrade engine.
//
// Setting STRATUM_FAULT=<point> makes the process kill itself with SIGKILL
// when it reaches that point: no deferred function runs and no buffer is
// flushed, exactly as in a kill -9 or a power loss after the last fsync. The
// crash-matrix tests use it to stop stratum-upgrade at every step boundary
// and then prove that `stratum-upgrade resume` converges.
//
// STRATUM_FAULT may name one point or several separated by commas. A point
// name may end in "#N" to fire only at its N-th hit (1-based). Unset, every
// point is inert: one string comparison against an empty list.
//
// Points are documented in docs/architecture.md; Points lists them.
package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// EnvVar is the environment variable that arms fault points.
const EnvVar = "STRATUM_FAULT"

var (
	once  sync.Once
	armed map[string]int // point -> hit number to fire at (0 = first)
	hits  map[string]int
	mu    sync.Mutex
)

func load() {
	armed = map[string]int{}
	hits = map[string]int{}
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
		armed[p] = n
	}
}

// Hit marks that the caller reached point. If STRATUM_FAULT arms it (and
// this is the armed hit), the process is SIGKILLed before Hit returns.
func Hit(point string) {
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

// Armed reports whether any fault point is armed.
func Armed() bool {
	once.Do(load)
	return len(armed) > 0
}
