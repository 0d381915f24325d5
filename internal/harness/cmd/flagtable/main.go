// Command flagtable writes, for etcd and each Kubernetes control-plane
// component, the set of long flag names its binary accepts, one per line,
// sorted, to <out>/<component>-<minor>.txt (etcd-3.7.txt,
// kube-apiserver-1.37.txt), after a header comment line (starting with #)
// saying where they came from and the version. Package versions embeds
// these tables to check a rendered flag against the version that will run
// it.
//
// etcd's flags come from its --help, which lists deprecated flags too.
// The Kubernetes components' come from flagdump (internal/harness/tools/
// kube1xx/flagdump), which builds each component's command as its binary
// does and prints its whole flag set: pflag leaves hidden and deprecated
// flags out of --help, yet the binary accepts them. When the component's
// binary is built too, its --help must list no flag the flag set lacks.
//
// By default it reads the etcd builds of etcdbuild.Builds that are in the
// cache (make real-binaries builds them) and says which it skipped, and
// builds the flagdump of each of kubebuild.Versions into the cache next to
// that version's binaries (a minute or so once the binaries are built;
// as long as they take from a cold build cache). -bin and -dump add a
// binary or a flagdump of any other build, -note a header line to their
// tables:
//
//	flagtable -out versions/flags -bin kube-apiserver:1.34=/tmp/kube134/bin/kube-apiserver
//	flagtable -out versions/flags -cached=false -dump 1.34=/tmp/fd134/flagdump -note 'built once ...'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// sourceList gathers the -bin and -dump flags, one source per
// component:minor.
type sourceList struct {
	srcs []source
}

func (l *sourceList) String() string { return fmt.Sprint(l.srcs) }

func (l *sourceList) add(s source) {
	for i := range l.srcs {
		if l.srcs[i].component == s.component && l.srcs[i].minor == s.minor {
			if s.path != "" {
				l.srcs[i].path = s.path
			}
			if s.dump != "" {
				l.srcs[i].dump = s.dump
			}
			return
		}
	}
	l.srcs = append(l.srcs, s)
}

// binFlag is -bin component:minor=path.
type binFlag struct{ *sourceList }

func (b binFlag) Set(s string) error {
	what, path, ok := strings.Cut(s, "=")
	comp, minor, ok2 := strings.Cut(what, ":")
	if !ok || !ok2 || path == "" || minor == "" {
		return fmt.Errorf("want component:minor=path, got %q", s)
	}
	b.add(source{component: comp, minor: minor, path: path})
	return nil
}

// dumpFlag is -dump minor=path: a flagdump, for every Kubernetes component.
type dumpFlag struct{ *sourceList }

func (d dumpFlag) Set(s string) error {
	minor, path, ok := strings.Cut(s, "=")
	if !ok || path == "" || minor == "" {
		return fmt.Errorf("want minor=path, got %q", s)
	}
	for _, c := range kubebuild.Components {
		d.add(source{component: c, minor: minor, dump: path})
	}
	return nil
}

func main() {
	out := flag.String("out", "versions/flags", "directory of the tables")
	featuresOut := flag.String("features", "versions/features", "directory of the feature-gate tables of the kubebuild versions (with -cached)")
	var extra sourceList
	flag.Var(binFlag{&extra}, "bin", "component:minor=path of a further binary, read with --help (repeatable)")
	flag.Var(dumpFlag{&extra}, "dump", "minor=path of a further flagdump, for the Kubernetes components (repeatable)")
	note := flag.String("note", "", "a further header line for the tables of -bin and -dump, saying how they were built")
	builtOnly := flag.Bool("cached", true, "also write the tables of every cached etcdbuild build and of every kubebuild version (building its flagdump)")
	flag.Parse()
	var srcs []source
	if *builtOnly {
		var skipped []string
		srcs, skipped = cached()
		for _, s := range skipped {
			fmt.Fprintf(os.Stderr, "flagtable: skipped %s: not built (make real-binaries)\n", s)
		}
	}
	for _, s := range extra.srcs {
		s.note = *note
		srcs = append(srcs, s)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, s := range srcs {
		t, err := generate(s)
		if err != nil {
			fail(err)
		}
		name := filepath.Join(*out, s.component+"-"+s.minor+".txt")
		if err := os.WriteFile(name, []byte(t.String()), 0o644); err != nil {
			fail(err)
		}
		fmt.Printf("%s: %d flags (%s)\n", name, len(t.flags), t.version)
	}
	if *builtOnly {
		if err := os.MkdirAll(*featuresOut, 0o755); err != nil {
			fail(err)
		}
		for _, v := range kubebuild.Versions {
			dump, err := flagdump(v)
			if err != nil {
				fail(err)
			}
			if err := writeFeatures(*featuresOut, v, kubebuild.Minor(v), dump); err != nil {
				fail(err)
			}
		}
	}
}

// cached is every etcd binary of etcdbuild.Builds in the cache, and the
// builds that are not; and each Kubernetes component of kubebuild.Versions
// with its version's flagdump, built if the cache lacks it, and the binary
// when it is built.
func cached() (srcs []source, skipped []string) {
	for _, b := range etcdbuild.Builds {
		t, err := b.Tool()
		if err != nil {
			fail(err)
		}
		if ok, err := t.Built(); err != nil || !ok {
			skipped = append(skipped, t.Name)
			continue
		}
		srcs = append(srcs, source{component: "etcd", minor: b.Minor, path: t.Paths()["etcd"]})
	}
	for _, v := range kubebuild.Versions {
		dump, err := flagdump(v)
		if err != nil {
			fail(err)
		}
		paths, err := kubebuild.Paths(v)
		if err != nil {
			fail(err)
		}
		built := kubebuild.Built(v)
		for _, c := range kubebuild.Components {
			s := source{component: c, minor: kubebuild.Minor(v), dump: dump}
			if built {
				s.path = paths[c]
			}
			srcs = append(srcs, s)
		}
	}
	return srcs, skipped
}

// flagdump is the path of version's flagdump, built into the cache
// beside version's binaries (kubebuild.Tool's directory, module and
// -ldflags) if it is not there.
func flagdump(version string) (string, error) {
	kt, err := kubebuild.Tool(version)
	if err != nil {
		return "", err
	}
	t := build.Tool{
		Name:      "flagdump " + version,
		Dir:       kt.Dir,
		ModuleDir: kt.ModuleDir,
		Packages:  []string{"./flagdump"},
		Binaries:  []string{"flagdump"},
		LDFlags:   kt.LDFlags,
		Version:   kt.Version,
		Timeout:   kt.Timeout,
	}
	if ok, err := t.Built(); err != nil {
		return "", err
	} else if !ok {
		fmt.Fprintf(os.Stderr, "flagtable: building %s (about a minute once the binaries are built, %s at most)\n", t.Name, t.Timeout)
		start := time.Now()
		if _, err := t.Build(context.Background()); err != nil {
			return "", err
		}
		fmt.Fprintf(os.Stderr, "flagtable: built %s in %s\n", t.Name, time.Since(start).Round(time.Second))
	}
	return t.Paths()["flagdump"], nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "flagtable:", err)
	os.Exit(1)
}
