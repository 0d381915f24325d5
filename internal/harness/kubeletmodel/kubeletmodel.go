// Package kubeletmodel is a deterministic, synchronous, in-memory kubelet
// over a real manifest directory. It answers the engine's process questions
// (it has the method set of engine.Processes: Mark, PastMark, PIDs, Active,
// WaitActive, WaitReplaced, WaitGone, and a surge's Instances,
// WaitInstanceActive, MemAvailable, RSS, Args) from pods it "runs" as
// records, not processes, so a whole crash matrix runs in milliseconds per
// case.
//
// It follows the kubelet stand-in's rules (docs/standin.md,
// internal/harness/kubeletsim), reduced to what can be decided at one
// instant:
//
//   - Sync. Every method first syncs with the directory: the listing is
//     kubeletsim.ListDir's (visible entries only, hidden names ignored, as
//     kubelet), each file decoded by kubeletsim.DecodePod. On a key held by
//     two files, the last in sort order wins, as on kubelet's relist.
//   - Identity. A pod's UID is kubeletsim's: a hash of the decoded pod, the
//     node name and the file's path. Any change that survives decoding (an
//     image, a flag, the restarted-at annotation) is a new UID; the same
//     content (the same bytes, or bytes that decode the same) is not.
//   - Replacement. A pod whose UID changed, or whose file is gone, is
//     killed at once (its processes vanish); a new UID starts at once. The
//     model has no grace period and no pod-worker hold-back: the sync that
//     sees the change does both.
//   - A file that does not decode. Like an inotify event on a bad file,
//     a sync leaves the pod that file last yielded running. A relist
//     (Relist, and the one every Reboot does) finds no pod in it and kills
//     that pod, as kubelet's next relist does.
//   - Admission. A new pod is admitted against the pods the model holds
//     (kubeletsim.Admit, kubelet's NodePorts check): one that declares a
//     host port another declares is rejected, runs nothing and is not
//     admitted again while its UID stays. New pods are admitted in key
//     order, after the sync's kills. Pods of different names are different
//     keys and run side by side (a surge beside its canonical pod).
//   - Pod identity. Instances groups a component's processes by pod UID;
//     Target.NotPods leaves a pod's processes out of Of, Arm, Replaced,
//     WaitReplaced and WaitGone (and Active without a health endpoint):
//     with a health endpoint, Active is the shared port, which either
//     instance answers.
//   - Listeners. A second instance binds its component's port only when
//     both carry --permit-port-sharing (SO_REUSEPORT); otherwise it exits
//     at start, never answers, and starts again at every sync (ports.go).
//   - Clock. A logical tick counter. Mark returns it with the boot id;
//     every process start advances it first, so a process started by a sync
//     after a Mark has start ticks greater than the mark; a process already
//     running when the mark was taken does not. PastMark advances the clock
//     past a mark of this boot.
//   - Process name. The base name of the container's command[0] (proc's
//     argv[0] rule); a container without a command (the image's entrypoint,
//     which the model does not know) is named after the container.
//   - Modes. From the image tag suffix, as the test bed's image map
//     (testbed.ModeImage: "<repo>:<tag>-<mode>"), or an image set with
//     SetImageMode. healthy and ignore-sigterm: active. never-listen and
//     unhealthy: running, never active. exit-at-start: a crash loop, each
//     sync alternately shows a new short-lived process and none, never
//     active. crash-after: active, but every later sync finds it exited and
//     restarted (a new process, new start tick), which is how kubelet's
//     CrashLoopBackOff restarts look to the soak. A component without a
//     health endpoint (kube-vip) is active when it runs, whatever its mode,
//     as proc.Active has it.
//   - Reboot. A new boot id, the clock back to zero, every process gone,
//     then a relist starts every pod again from the files on disk. Pids are
//     never reused, across boots included.
//   - Waits never sleep. The condition is checked once (after the sync);
//     when it is false the deadline is taken as passed, and the error says
//     what was waited for and why not, as proc's do, wrapping
//     context.DeadlineExceeded (or ctx's error when ctx has ended).
//
// A Kubelet is not safe for concurrent use.
package kubeletmodel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/proc"
)

// Kubelet is the model. New returns one that has synced once.
type Kubelet struct {
	dir    string
	node   string
	boot   int
	bootID string
	clock  uint64
	pid    int
	pods   map[string]*pod // by key
	images map[string]standin.Mode
	events []string
	// bad is the files that failed to decode at the last sync, with why.
	bad map[string]string
	// decoded caches the last decode of each file by its bytes: decoding
	// is most of a sync's cost, and the same bytes decode the same.
	decoded map[string]decoded
	// held, lag and pending are the delays of delays.go.
	held    map[string]bool
	lag     int
	pending map[string]int
	// memSet, memAvail and rss are SetMemory's (surge.go).
	memSet        bool
	memAvail, rss uint64
}

type decoded struct {
	raw []byte
	sp  *kubeletsim.SourcePod
	err error
}

type pod struct {
	key, file, uid string
	sp             *kubeletsim.SourcePod
	containers     []*container
	// rejected is why admission refused the pod (kubeletsim.Admit): it
	// runs no container until its UID changes.
	rejected *kubeletsim.RejectedError
}

type container struct {
	name   string
	binary string
	argv   []string
	mode   standin.Mode
	proc   *proc.Process // nil: no process (exit-at-start between restarts)
	// bindFailed: the process could not bind its port (ports.go); it
	// exited at start and restarts at every sync.
	bindFailed bool
}

// New returns a model kubelet for node nodeName over the manifest directory
// dir, synced once: every pod in dir runs.
func New(dir, nodeName string) (*Kubelet, error) {
	k := &Kubelet{dir: dir, node: nodeName, boot: 1, pods: map[string]*pod{}, images: map[string]standin.Mode{}, decoded: map[string]decoded{},
		held: map[string]bool{}, pending: map[string]int{}}
	k.bootID = bootID(k.boot)
	if err := k.sync(true); err != nil {
		return nil, err
	}
	return k, nil
}

func bootID(n int) string { return fmt.Sprintf("model-boot-%d", n) }

// BootID is the current boot id, what Mark reports. It does not sync.
func (k *Kubelet) BootID() string { return k.bootID }

// SetImageMode makes every container started from image later run in mode,
// whatever its tag says (the test bed's image map). Running containers keep
// their mode until they start again.
func (k *Kubelet) SetImageMode(image string, mode standin.Mode) { k.images[image] = mode }

// ModeOf is the stand-in mode an image reference selects: the suffix
// "-<mode>" of its tag (testbed.ModeImage), healthy without one.
func ModeOf(image string) standin.Mode {
	ref := image
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return standin.ModeHealthy
	}
	tag := ref[i+1:]
	for _, m := range standin.Modes {
		if m != standin.ModeHealthy && strings.HasSuffix(tag, "-"+string(m)) {
			return m
		}
	}
	return standin.ModeHealthy
}

func (k *Kubelet) modeOf(image string) standin.Mode {
	if m, ok := k.images[image]; ok {
		return m
	}
	return ModeOf(image)
}

// Events is what the model did, in order ("start <key> <uid8> pid N tick T",
// "kill ...", "exit ...", "reboot ..."), for failure messages.
func (k *Kubelet) Events() []string { return append([]string(nil), k.events...) }

func (k *Kubelet) logf(format string, args ...any) {
	k.events = append(k.events, fmt.Sprintf("[%s t%d] ", k.bootID, k.clock)+fmt.Sprintf(format, args...))
}

// Sync syncs with the directory now (every other method does it first).
func (k *Kubelet) Sync() error { return k.sync(false) }

// Relist syncs as kubelet's periodic relist does: a file that does not
// decode yields no pod, so the pod it last yielded is killed.
func (k *Kubelet) Relist() error { return k.sync(true) }

// Reboot models a power cycle: a new boot id, the clock back to zero, every
// process gone, and every pod started again from the files on disk (a
// relist, so a file that does not decode runs nothing).
func (k *Kubelet) Reboot() error {
	k.boot++
	k.bootID = bootID(k.boot)
	k.clock = 0
	k.pods = map[string]*pod{}
	k.pending = map[string]int{}
	k.logf("reboot")
	return k.sync(true)
}

// sync lists the directory and brings the pods in line with it; relist
// says whether a file that does not decode drops its pod.
func (k *Kubelet) sync(relist bool) error {
	paths, err := kubeletsim.ListDir(k.dir)
	if err != nil {
		return err
	}
	want := map[string]*kubeletsim.SourcePod{}
	k.bad = map[string]string{}
	for _, p := range paths {
		sp, err := k.read(p)
		if errors.Is(err, kubeletsim.ErrDirectory) || errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			k.bad[p] = err.Error()
			continue
		}
		want[sp.Key] = sp // sorted listing: the last file wins a key
	}
	if !relist {
		// A file that failed to parse keeps the pod it last yielded.
		for _, p := range k.pods {
			if _, isBad := k.bad[p.file]; isBad && want[p.key] == nil {
				want[p.key] = &kubeletsim.SourcePod{Key: p.key, UID: p.uid, File: p.file}
			}
		}
	}
	k.delay(want)
	for _, key := range sortedKeys(k.pods) {
		p := k.pods[key]
		if w := want[key]; w == nil || w.UID != p.uid {
			why := "its file is gone"
			if w != nil {
				why = "replaced by " + short(w.UID) + " from " + filepath.Base(w.File)
			}
			k.kill(p, why)
		}
	}
	for _, key := range sortedKeys(want) {
		w := want[key]
		if p := k.pods[key]; p != nil {
			k.advance(p)
			continue
		}
		k.start(w)
	}
	return nil
}

// read is kubeletsim.ReadPodFile, decoding only bytes it has not decoded
// for path before.
func (k *Kubelet) read(path string) (*kubeletsim.SourcePod, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > kubeletsim.MaxManifestSize {
		return kubeletsim.ReadPodFile(path, k.node) // its error
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if d, ok := k.decoded[path]; ok && bytes.Equal(d.raw, raw) {
		return d.sp, d.err
	}
	sp, err := kubeletsim.DecodePod(raw, path, k.node)
	k.decoded[path] = decoded{raw: raw, sp: sp, err: err}
	return sp, err
}

func (k *Kubelet) kill(p *pod, why string) {
	if p.rejected != nil {
		k.logf("drop rejected %s %s: %s", p.key, short(p.uid), why)
	}
	for _, c := range p.containers {
		if c.proc != nil {
			k.logf("kill %s %s pid %d: %s", p.key, short(p.uid), c.proc.PID, why)
		}
	}
	delete(k.pods, p.key)
}

func (k *Kubelet) start(sp *kubeletsim.SourcePod) {
	p := &pod{key: sp.Key, file: sp.File, uid: sp.UID, sp: sp}
	k.pods[p.key] = p
	if err := kubeletsim.Admit(sp, k.admitted(p)); err != nil {
		k.reject(p, err)
		return
	}
	for _, c := range sp.Pod.Spec.Containers {
		bin := c.Name
		if len(c.Command) > 0 {
			bin = path.Base(c.Command[0])
		}
		ct := &container{name: c.Name, binary: bin, argv: argv(c), mode: k.modeOf(c.Image)}
		k.run(p, ct)
		p.containers = append(p.containers, ct)
	}
}

// run starts a new process for c: the clock moves first, so its start is
// after every mark taken so far.
func (k *Kubelet) run(p *pod, c *container) {
	k.clock++
	k.pid++
	c.proc = &proc.Process{PID: k.pid, StartTicks: k.clock}
	k.logf("start %s %s %s (%s) pid %d", p.key, short(p.uid), c.binary, c.mode, k.pid)
	if c.bindFailed = k.bindBlocked(c); c.bindFailed {
		k.logf("pid %d of %s cannot bind its port (address already in use): it exits at start", k.pid, p.key)
	}
}

// advance is what a pod that was already running does by this sync: a
// crash loop shows its next state.
func (k *Kubelet) advance(p *pod) {
	for _, c := range p.containers {
		if c.bindFailed {
			k.logf("exit %s pid %d (address already in use); restarted", p.key, c.proc.PID)
			k.run(p, c)
			continue
		}
		switch c.mode {
		case standin.ModeCrashAfter:
			k.logf("exit %s pid %d (crash-after); restarted", p.key, c.proc.PID)
			k.run(p, c)
		case standin.ModeExitAtStart:
			if c.proc != nil {
				k.logf("exit %s pid %d (exit-at-start); back-off", p.key, c.proc.PID)
				c.proc = nil
			} else {
				k.run(p, c)
			}
		}
	}
}

func short(uid string) string {
	if len(uid) > 8 {
		return uid[:8]
	}
	return uid
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
