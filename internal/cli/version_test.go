package cli

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

// TestBuildVersion: without -ldflags, version takes the module version and
// the commit from the build info (go install, go build in a clone); an
// ldflags version wins over the module version, never over the commit.
func TestBuildVersion(t *testing.T) {
	info := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/ciq/stratum-upgrade", Version: "v0.0.0-20261205021500-6e25152abcde+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "6e25152abcdef0123456789"},
			{Key: "vcs.time", Value: "2026-12-05T02:15:00Z"}, {Key: "vcs.modified", Value: "true"},
		},
	}
	v := buildVersion("dev", info)
	if v.Version != info.Main.Version || v.Commit == nil || *v.Commit != "6e25152abcdef0123456789" ||
		v.CommitTime == nil || *v.CommitTime != "2026-12-05T02:15:00Z" || !v.Modified {
		t.Errorf("from build info: %+v", v)
	}
	if v := buildVersion("v1.2.3", info); v.Version != "v1.2.3" || v.Commit == nil {
		t.Errorf("ldflags version: %+v", v)
	}
	info.Main.Version = "(devel)"
	info.Settings = nil
	if v := buildVersion("dev", info); v.Version != "dev" || v.Commit != nil || v.Modified {
		t.Errorf("no stamp: %+v", v)
	}
	if v := buildVersion("dev", nil); v.Version != "dev" {
		t.Errorf("no build info: %+v", v)
	}
}

// TestVersionSaysWhyDev: a binary with neither an -ldflags version nor a
// VCS stamp (this test binary: go test stamps none) says its commit is
// unknown and how to build one that knows it.
func TestVersionSaysWhyDev(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"version"}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("version: exit %d\n%s", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "stratum-upgrade dev\ncommit: unknown (") || !strings.Contains(out, "`make build`") {
		t.Errorf("version of an unstamped build:\n%s\nwant the commit unknown and make build named", out)
	}
}
