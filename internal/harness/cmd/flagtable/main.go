// Command flagtable writes, for each built etcd and Kubernetes control-plane
// binary, the set of long flag names its --help lists, one per line, sorted,
// to <out>/<component>-<minor>.txt (etcd-3.7.txt, kube-apiserver-1.37.txt),
// after a header comment line (starting with #) naming the binary and the
// version that generated it. Package versions embeds these tables to check
// a rendered flag against the version that will run it.
//
// By default it reads the builds of etcdbuild.Builds and kubebuild.Versions
// that are in the cache (make real-binaries builds them) and says which it
// skipped. -bin adds a binary of any other build:
//
//	flagtable -out versions/flags -bin kube-apiserver:1.34=/tmp/kube134/bin/kube-apiserver
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

type binList []source

func (b *binList) String() string { return fmt.Sprint(*b) }

func (b *binList) Set(s string) error {
	what, path, ok := strings.Cut(s, "=")
	comp, minor, ok2 := strings.Cut(what, ":")
	if !ok || !ok2 || path == "" || minor == "" {
		return fmt.Errorf("want component:minor=path, got %q", s)
	}
	*b = append(*b, source{component: comp, minor: minor, path: path})
	return nil
}

func main() {
	out := flag.String("out", "versions/flags", "directory of the tables")
	var extra binList
	flag.Var(&extra, "bin", "component:minor=path of a further binary (repeatable)")
	builtOnly := flag.Bool("cached", true, "also write the tables of every cached etcdbuild and kubebuild build")
	flag.Parse()
	var srcs []source
	if *builtOnly {
		var skipped []string
		srcs, skipped = cached()
		for _, s := range skipped {
			fmt.Fprintf(os.Stderr, "flagtable: skipped %s: not built (make real-binaries)\n", s)
		}
	}
	srcs = append(srcs, extra...)
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
}

// cached is every binary of etcdbuild.Builds and kubebuild.Versions in
// the cache, and the builds that are not.
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
		if !kubebuild.Built(v) {
			skipped = append(skipped, "kubernetes "+v)
			continue
		}
		paths, err := kubebuild.Paths(v)
		if err != nil {
			fail(err)
		}
		for _, c := range kubebuild.Components {
			srcs = append(srcs, source{component: c, minor: kubebuild.Minor(v), path: paths[c]})
		}
	}
	return srcs, skipped
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "flagtable:", err)
	os.Exit(1)
}
