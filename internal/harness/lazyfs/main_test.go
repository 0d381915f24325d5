package lazyfs

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if stale := CleanStaleMounts(); len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "lazyfs: detached stale mounts: %v\n", stale)
	}
	os.Exit(m.Run())
}
