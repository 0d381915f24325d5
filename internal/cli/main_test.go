package cli

import (
	"os"
	"testing"
)

// mainEnv, set to 1 in a child process's environment, makes this test
// binary run stratum-upgrade (Main) instead of the tests: a command holds
// the manifest directory's lock until its process exits, and a test can
// run it under another uid.
const mainEnv = "STRATUM_CLI_TEST_MAIN"

// TestMain runs Main when mainEnv says so. Otherwise it runs the tests with
// STRATUM_CONFIG set empty, so that no test reads the host's config file
// (a test that wants one names it with t.Setenv).
func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(configEnv, "")
	os.Exit(m.Run())
}
