package engine

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
)

// Sampling the fault matrices. Every case of the real-binary matrices
// (kill, reboot, power loss, power cut at every I/O, I/O errors) is a fresh
// node, so all of them take a quarter of an hour: make check (and so CI)
// runs them in full with STRATUM_MATRIX=full, while go test and make test
// run a sample that covers every phase of every scenario once and changes
// from run to run, so that the quick suite still reaches every part of a
// transaction and, over many runs, every case. A phase is a point without
// its component (after-begin, before-write, rollback-after-stop...), or
// for the I/O matrices the stretch of the transaction a case falls in.

const (
	// matrixEnv selects the cases: "full" runs every one; "" or "sample"
	// a sample (the default, so that go test ./... stays quick).
	matrixEnv = "STRATUM_MATRIX"
	// seedEnv replays a run's sample: make test prints the seed it used,
	// and each matrix logs it.
	seedEnv = "STRATUM_SEED"
)

// matrixConfig is the mode and seed of this test process, read once: every
// matrix of a run samples from the same seed.
type matrixConfig struct {
	full bool
	seed uint64
	err  error
}

var matrixSettings = sync.OnceValue(func() matrixConfig {
	var c matrixConfig
	switch v := os.Getenv(matrixEnv); v {
	case "", "sample":
	case "full":
		c.full = true
	default:
		c.err = fmt.Errorf("%s=%q: want \"full\" (every case) or \"sample\" (the default)", matrixEnv, v)
		return c
	}
	c.seed = uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			c.err = fmt.Errorf("%s=%q: want the unsigned integer a run printed", seedEnv, v)
			return c
		}
		c.seed = s
	}
	return c
})

// sampler chooses the cases one matrix runs.
type sampler struct {
	matrix string
	full   bool
	seed   uint64
}

// newSampler is the sampler of the matrix named matrix (its top-level
// test).
func newSampler(matrix string) *sampler {
	c := matrixSettings()
	return &sampler{matrix: matrix, full: c.full, seed: c.seed}
}

// logPicked logs how many of a scenario's cases the sample runs.
func (s *sampler) logPicked(t *testing.T, picked, all int) {
	t.Helper()
	if !s.full {
		t.Logf("sampled %d of %d cases", picked, all)
	}
}

// rng is the random source of one scenario of the matrix: seeded by the
// run's seed and the names, so that a scenario run alone (go test -run)
// with the seed replays the same cases.
func (s *sampler) rng(scenario string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(s.matrix + "/" + scenario))
	return rand.New(rand.NewPCG(s.seed, h.Sum64()))
}

// pick returns the indexes of the n cases of scenario to run, ascending:
// every one in full mode, else one case of each phase (phase(i) is case
// i's) and, among a phase's cases, one whose component (comp(i), "" for
// none) the sample has covered least, so that every component is met too
// where the phases allow it.
func (s *sampler) pick(scenario string, n int, phase, comp func(int) string) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if s.full {
		return all
	}
	rng := s.rng(scenario)
	groups := map[string][]int{}
	var phases []string
	for _, i := range all {
		p := phase(i)
		if _, ok := groups[p]; !ok {
			phases = append(phases, p)
		}
		groups[p] = append(groups[p], i)
	}
	rng.Shuffle(len(phases), func(a, b int) { phases[a], phases[b] = phases[b], phases[a] })
	covered := map[string]int{}
	var out []int
	for _, p := range phases {
		cases := groups[p]
		rng.Shuffle(len(cases), func(a, b int) { cases[a], cases[b] = cases[b], cases[a] })
		best := cases[0]
		for _, i := range cases[1:] {
			if covered[comp(i)] < covered[comp(best)] {
				best = i
			}
		}
		covered[comp(best)]++
		out = append(out, best)
	}
	slices.Sort(out)
	return out
}

// points returns the points of scenario to run, in their order: all of
// them in full mode, else one of each phase (pointPhase). Points in skip
// (not on the transaction's path) are never sampled: a case there only
// skips.
func (s *sampler) points(scenario string, pts []fault.Point, skip map[fault.Point]string) []fault.Point {
	if s.full {
		return pts
	}
	var on []fault.Point
	for _, p := range pts {
		if _, ok := skip[p]; !ok {
			on = append(on, p)
		}
	}
	var out []fault.Point
	for _, i := range s.pick(scenario, len(on), func(i int) string { return pointPhase(on[i]) }, func(i int) string { return pointComponent(on[i]) }) {
		out = append(out, on[i])
	}
	return out
}

// pointPhase is p without its component: before-write:etcd and
// before-write:kube-scheduler are one phase.
func pointPhase(p fault.Point) string {
	phase, _, _ := strings.Cut(string(p), ":")
	return phase
}

// pointComponent is the component p names, or "".
func pointComponent(p fault.Point) string {
	_, comp, _ := strings.Cut(string(p), ":")
	return comp
}

// The sample of each scenario holds one point of every phase, meets every
// component, is the same for the same seed and another for another (it
// rotates from run to run); in full mode it is every point.
func TestMatrixSample(t *testing.T) {
	st := mustState(t, testbed.Options{})
	roster := manifest.NamesFor(st)
	for _, sc := range memScenarios(st) {
		t.Run(sc.name, func(t *testing.T) {
			phases, comps := map[string]bool{}, map[string]bool{}
			for _, p := range sc.points {
				phases[pointPhase(p)] = true
				if c := pointComponent(p); c != "" {
					comps[c] = true
				}
			}
			if got := (&sampler{full: true}).points(sc.name, sc.points, nil); !slices.Equal(got, sc.points) {
				t.Fatalf("full mode: %v, want every point %v", got, sc.points)
			}
			differ := false
			for seed := uint64(1); seed <= 20; seed++ {
				s := &sampler{matrix: "TestX", seed: seed}
				got := s.points(sc.name, sc.points, nil)
				seen, met := map[string]int{}, map[string]bool{}
				for _, p := range got {
					seen[pointPhase(p)]++
					met[pointComponent(p)] = true
				}
				for ph := range phases {
					if seen[ph] != 1 {
						t.Errorf("seed %d: phase %s sampled %d times, want once: %v", seed, ph, seen[ph], got)
					}
				}
				if len(got) != len(phases) {
					t.Errorf("seed %d: %d points for %d phases: %v", seed, len(got), len(phases), got)
				}
				for c := range comps {
					if !met[c] {
						t.Errorf("seed %d: component %s never met (roster %v): %v", seed, c, roster, got)
					}
				}
				if again := s.points(sc.name, sc.points, nil); !slices.Equal(again, got) {
					t.Errorf("seed %d: a replay chose %v, the run %v", seed, again, got)
				}
				if other := (&sampler{matrix: "TestX", seed: seed + 100}).points(sc.name, sc.points, nil); !slices.Equal(other, got) {
					differ = true
				}
			}
			// A scenario of one component (stop, start) has one point
			// per phase: its sample is every point.
			if !differ && len(phases) < len(sc.points) {
				t.Error("twenty seeds chose the same sample: it does not rotate")
			}
		})
	}
	// Points not on the path are never chosen.
	pts := fault.UpgradePoints(roster)
	skip := map[fault.Point]string{fault.AfterEtcdBackup: "not on the path"}
	for seed := uint64(1); seed <= 20; seed++ {
		if got := (&sampler{seed: seed}).points("x", pts, skip); slices.Contains(got, fault.AfterEtcdBackup) {
			t.Fatalf("seed %d sampled a point not on the path: %v", seed, got)
		}
	}
}
