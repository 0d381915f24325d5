package engine

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain says once which cases the fault matrices run, with the seed:
// a failing sampled case is replayed with it (sample_test.go). A bad
// STRATUM_MATRIX or STRATUM_SEED stops the run before any test.
//
// Unless -parallel is given, eight tests run at a time rather than one
// per core: most of an engine test waits on its test bed node's kubelet
// stand-in or on fsync, and at one per core a plain go test ./... on 2
// cores would run past go test's default 10-minute timeout.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", "8"); err != nil {
			fmt.Fprintln(os.Stderr, "engine tests:", err)
			os.Exit(2)
		}
	}
	c := matrixSettings()
	if c.err != nil {
		fmt.Fprintln(os.Stderr, "engine tests:", c.err)
		os.Exit(2)
	}
	if c.full {
		fmt.Printf("engine: fault matrices in full (%s=full)\n", matrixEnv)
	} else {
		fmt.Printf("engine: fault matrices sampled, seed %d (replay: %s=%d; every case: %s=full)\n", c.seed, seedEnv, c.seed, matrixEnv)
	}
	os.Exit(m.Run())
}
