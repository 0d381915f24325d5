package engine

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// caseTimes collects how long each case of a matrix took; the cases run in
// parallel (t.Parallel), so add locks.
type caseTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

// since records the case that began at t0.
func (c *caseTimes) since(t0 time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.d = append(c.d, time.Since(t0))
}

// String is the count and the mean, median and longest case, or "" when no
// case ran.
func (c *caseTimes) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.d) == 0 {
		return ""
	}
	d := slices.Sorted(slices.Values(c.d))
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return fmt.Sprintf("%d cases: per case mean %s, median %s, max %s", len(d),
		(sum / time.Duration(len(d))).Round(time.Millisecond), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
}
