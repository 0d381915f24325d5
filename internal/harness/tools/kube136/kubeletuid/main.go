// Command kubeletuid prints, for each static pod manifest of a directory,
// the pod's name and UID as the real kubelet of this module's version
// computes them: the manifest goes through kubelet's own file source
// (k8s.io/kubernetes/pkg/kubelet/config.NewSourceFile) and pod config mux
// (config.NewPodConfig), exactly as kubelet's makePodSourceConfig wires
// them (source.go, the one file that differs between the minors' copies:
// their kubelet APIs differ), and the pod of the first update is read
// back. The UID is kubelet's hash (source.go names it) of the decoded,
// defaulted internal pod followed by "host:<node>" and "file:<path>"
// (pkg/kubelet/config/common.go, applyDefaults), so it depends on the
// manifest's meaning, the node name and the file's path, not on the YAML's
// layout.
//
//	kubeletuid --version                  Kubernetes vX.Y.Z of this module (from -ldflags)
//	kubeletuid -node NAME [-as PATH] DIR   JSON {"<file>": {"name": ..., "uid": ...}} on stdout
//
// The files are those kubelet reads from a static pod directory: the
// regular files whose names do not begin with a dot. Each is read by a
// file source of its own, so that its UID can be told apart, and the
// whole directory once more by one source, as kubelet reads it: a file
// whose pod that reading drops (a duplicate pod name) is an error, as is
// a file kubelet cannot decode or validate.
//
// -as computes the UIDs as if DIR were at PATH (kubelet's staticPodPath,
// /etc/kubernetes/manifests under kubeadm): the path is part of the hash.
// It copies the files to PATH inside a temporary root and chroot(2)s
// there for the reading (root only), then leaves the chroot and removes
// the root.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/version"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// Pod is one file's entry in the output.
type Pod struct {
	// Name is the pod's name as kubelet names it: the manifest's name,
	// a dash, the node name lowercased.
	Name string `json:"name"`
	// UID is the UID kubelet gives the pod (its config hash too).
	UID string `json:"uid"`
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("Kubernetes " + version.Get().GitVersion)
		return
	}
	node := flag.String("node", "", "the node name kubelet runs with (required)")
	as := flag.String("as", "", "compute the UIDs as if the directory were at this absolute path (root: chroot); default the directory itself")
	timeout := flag.Duration("timeout", 30*time.Second, "how long to wait for each update of kubelet's file source")
	flag.Parse()
	if *node == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: kubeletuid --version | kubeletuid -node NAME [-as PATH] [-timeout D] DIR")
		os.Exit(2)
	}
	pods, err := run(flag.Arg(0), *node, *as, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeletuid:", err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(pods, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeletuid:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// run reads dir's manifests as kubelet would at path as (dir when empty).
func run(dir, node, as string, timeout time.Duration) (map[string]Pod, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	names, err := manifests(dir)
	if err != nil {
		return nil, err
	}
	if as == "" || filepath.Clean(as) == dir {
		return uids(dir, names, node, timeout)
	}
	if !filepath.IsAbs(as) {
		return nil, fmt.Errorf("-as %q: want an absolute path", as)
	}
	var pods map[string]Pod
	err = chrooted(dir, filepath.Clean(as), names, func() error {
		var err error
		pods, err = uids(filepath.Clean(as), names, node, timeout)
		return err
	})
	return pods, err
}

// manifests are the names of the files kubelet reads in dir: its glob
// "[^.]*", regular files only (it skips directories, and follows
// symbolic links, as os.Stat does), sorted.
func manifests(dir string) ([]string, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "[^.]*"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var names []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		if st.Mode().IsRegular() {
			names = append(names, filepath.Base(p))
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no manifest (kubelet reads the regular files not named .*)", dir)
	}
	sort.Strings(names)
	return names, nil
}

// uids reads each file of dir through a file source of its own, then the
// whole directory through one, and checks that the second holds every pod
// of the first.
func uids(dir string, names []string, node string, timeout time.Duration) (map[string]Pod, error) {
	pods := make(map[string]Pod, len(names))
	for _, n := range names {
		got, err := read(filepath.Join(dir, n), node, timeout)
		if err != nil {
			return nil, err
		}
		if len(got) != 1 {
			return nil, fmt.Errorf("%s: kubelet's file source sent %d pods for one file", n, len(got))
		}
		pods[n] = Pod{Name: got[0].Name, UID: string(got[0].UID)}
	}
	all, err := read(dir, node, timeout)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(all))
	for _, p := range all {
		seen[string(p.UID)] = true
	}
	for _, n := range names {
		if !seen[pods[n].UID] {
			return nil, fmt.Errorf("%s: kubelet reading %s drops its pod %s (another file's pod has its name?)", n, dir, pods[n].Name)
		}
	}
	return pods, nil
}

// read starts kubelet's file source on path (a file or a directory) and
// returns the pods of its first update, or the first error the source
// logs, or an error when neither came within timeout.
func read(path, node string, timeout time.Duration) ([]*v1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make(chan error, 1)
	updates := fileSource(ctx, logr.New(errSink{errs}), path, node)
	select {
	case u := <-updates:
		if u.Op != kubetypes.ADD {
			return nil, fmt.Errorf("%s: kubelet's file source sent op %v first, want ADD", path, u.Op)
		}
		return u.Pods, nil
	case err := <-errs:
		return nil, fmt.Errorf("%s: kubelet's file source: %w", path, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: kubelet's file source sent no update within %s", path, timeout)
	}
}

// errSink is the logger handed to the file source: it reports a manifest
// it cannot read only by logging it, so a logged error is the failure.
type errSink struct{ errs chan<- error }

func (errSink) Init(logr.RuntimeInfo)            {}
func (errSink) Enabled(int) bool                 { return false }
func (errSink) Info(int, string, ...any)         {}
func (s errSink) WithValues(...any) logr.LogSink { return s }
func (s errSink) WithName(string) logr.LogSink   { return s }

func (s errSink) Error(err error, msg string, kv ...any) {
	e := fmt.Errorf("%s %v", msg, kv)
	if err != nil {
		e = fmt.Errorf("%s %v: %w", msg, kv, err)
	}
	select {
	case s.errs <- e:
	default: // the first error is the one reported
	}
}

// chrooted copies dir's files to as inside a fresh temporary root,
// chroots there for f, then returns to the real root and removes the
// temporary one.
func chrooted(dir, as string, names []string, f func() error) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("-as needs root (it chroots so that kubelet's file source reads the files at that path)")
	}
	tmp, err := os.MkdirTemp("", "kubeletuid-")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = rerr
		}
	}()
	target := filepath.Join(tmp, as)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(target, n), b, 0o600); err != nil {
			return err
		}
	}
	root, err := os.Open("/")
	if err != nil {
		return err
	}
	defer root.Close()
	if err := syscall.Chroot(tmp); err != nil {
		return fmt.Errorf("chroot %s: %w", tmp, err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	ferr := f()
	// Back to the real root: fchdir to a directory outside the chroot,
	// then make it the root again.
	if err := syscall.Fchdir(int(root.Fd())); err != nil {
		return fmt.Errorf("leave the chroot: %w", err)
	}
	if err := syscall.Chroot("."); err != nil {
		return fmt.Errorf("leave the chroot: %w", err)
	}
	if ferr != nil {
		return fmt.Errorf("%w (as if %s were at %s)", ferr, strings.TrimSuffix(dir, "/"), as)
	}
	return nil
}
