// Package kubeletsim is a kubelet stand-in for tests and the demo: it runs
// the static pods of one manifest directory as host processes, following
// the rules of a real kubelet's file source and pod workers (see
// docs/standin.md and /work/shared/specs/kubelet-static-pods.md):
//
//   - a relist at start and every RelistInterval, plus inotify on the
//     directory; every visible entry is a candidate, sorted by full path,
//     hidden names ignored, directories not recursed into, bad files logged;
//   - the last file in sort order wins a pod key on a relist; an inotify
//     create/modify re-parses that one file and takes the key, a bad file
//     on an event is ignored (the old pod keeps running until the relist),
//     a removed file deletes the key it last yielded;
//   - the pod UID hashes the decoded pod, the node name and the file path,
//     so identical bytes or whitespace change nothing while any semantic
//     change kills the old pod (SIGTERM, grace, SIGKILL) and starts the new
//     one only after the old has terminated, held back by kubelet's
//     pod-worker backoff (StartDelay plus jitter); a pod's containers start
//     StartLatency after its start is decided (sandbox, image, container
//     creation);
//   - a new pod is admitted first: one declaring a host port an active pod
//     declares is rejected (NodePorts, phase Failed) and never runs;
//   - restartPolicy with CrashLoopBackOff, $(VAR) expansion, an environment
//     of the pod's env over the image's ENV plus what the container runtime
//     adds when neither sets it (PATH, HOSTNAME, HOME), and nothing else.
//
// Each container runs in its own process group, with Pdeathsig SIGKILL so a
// stand-in that dies takes its pods with it (unlike kubelet, whose pods
// survive it): the test bed must never leak a process. A status endpoint
// serves GET /pods as JSON.
package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ciq/stratum-upgrade/durable"
)

// StatusAddrFile is the file in Config.RootDir the running stand-in writes
// its status endpoint's host:port to, atomically, once it is serving.
const StatusAddrFile = "status.addr"

// Defaults, the real kubelet's values.
const (
	DefaultRelistInterval = 20 * time.Second // fileCheckFrequency
	DefaultStartDelay     = 10 * time.Second // pod workers' backOffPeriod
	DefaultStartJitter    = 0.5              // workerBackOffPeriodJitterFactor
	DefaultGraceFloor     = 2 * time.Second  // minimumGracePeriodInSeconds
	DefaultBackoffBase    = 10 * time.Second // CrashLoopBackOff initial
	DefaultBackoffCap     = 300 * time.Second
	DefaultBackoffReset   = 10 * time.Minute // 2 * cap: backoff entry expiry
	DefaultHousekeeping   = 2 * time.Second  // housekeepingPeriod
	defaultGraceSeconds   = 30
)

// Config configures a stand-in. Zero durations take the Default values.
type Config struct {
	// ManifestDir is the staticPodPath. It need not exist yet.
	ManifestDir string
	// RootDir holds the stand-in's own files: container logs under logs/,
	// and StatusAddrFile. It is created if missing.
	RootDir string
	// NodeName suffixes every pod name and enters the UID hash.
	NodeName string
	// CgroupParent, when set, is a cgroup v2 directory the stand-in runs
	// every container in, under kubelet's cgroupfs names for the pod
	// (kubepods/<qos>/pod<UID>/<container>, see cgroup.go); it removes a
	// pod's cgroup when it releases the pod's name. Empty: containers stay
	// in the stand-in's own cgroup.
	CgroupParent string
	// NodeIP is what status.hostIP and status.podIP fieldRefs resolve to;
	// default 127.0.0.1.
	NodeIP string
	// ImageMapFile is the image map (see LoadImageMap), read at every
	// container start. Images, when non-nil, is used instead.
	ImageMapFile string
	Images       ImageMap
	// StatusAddr is where the status endpoint listens; default
	// 127.0.0.1:0 (a free port, written to StatusAddrFile).
	StatusAddr string

	RelistInterval time.Duration
	// StartDelay is how long a pod that had to wait for an older pod of
	// the same name waits before it is checked again; StartJitter adds up
	// to that fraction of it at random (0 means DefaultStartJitter, a
	// negative value no jitter).
	StartDelay  time.Duration
	StartJitter float64
	// StartLatency is how long every pod start takes from being decided
	// (no older pod of its name in the way) to its containers' processes
	// starting: the sandbox, image and container creation of a real
	// kubelet, about 0.47 s from a manifest write to the new process. The
	// pod counts as started meanwhile (it holds its name; its containers
	// are waiting, reason ContainerCreating); one killed meanwhile never
	// starts a process. 0 (the default) starts them at once. Container
	// restarts within a running pod do not wait it.
	StartLatency time.Duration
	// GraceFloor is the least grace period a kill gets; GraceCap, when
	// positive, the most (tests lower it below the pod's seconds).
	GraceFloor time.Duration
	GraceCap   time.Duration
	// CrashLoopBackOff: the first restart is immediate, the next waits
	// BackoffBase after the previous start, doubling up to BackoffCap; a
	// container whose last start is older than BackoffReset starts afresh.
	BackoffBase  time.Duration
	BackoffCap   time.Duration
	BackoffReset time.Duration
	// Housekeeping is how long a terminated pod still holds its name
	// against a new pod of the same name.
	Housekeeping time.Duration

	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	dur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	dur(&c.RelistInterval, DefaultRelistInterval)
	dur(&c.StartDelay, DefaultStartDelay)
	dur(&c.GraceFloor, DefaultGraceFloor)
	dur(&c.BackoffBase, DefaultBackoffBase)
	dur(&c.BackoffCap, DefaultBackoffCap)
	dur(&c.BackoffReset, DefaultBackoffReset)
	dur(&c.Housekeeping, DefaultHousekeeping)
	if c.StartJitter == 0 {
		c.StartJitter = DefaultStartJitter
	}
	if c.StatusAddr == "" {
		c.StatusAddr = "127.0.0.1:0"
	}
	if c.NodeIP == "" {
		c.NodeIP = "127.0.0.1"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

// Kubelet is a running (or runnable) stand-in. Create it with New and run
// it with Run.
type Kubelet struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	store    map[string]*SourcePod // pod key -> pod, the file source's store
	fileKey  map[string]string     // file -> the key it last yielded
	pods     map[string]*pod       // by UID: the pod workers
	stopping bool
	finished bool          // Run has returned: timers still pending do nothing
	changed  chan struct{} // closed and replaced on every state change
	procs    sync.WaitGroup
	history  []Event
	relists  int // completed relists
	handled  int // inotify events handled

	relistNow chan chan struct{} // tests: run a relist now

	addr string
}

// New validates cfg and returns a stand-in ready to Run.
func New(cfg Config) (*Kubelet, error) {
	cfg.setDefaults()
	switch {
	case cfg.ManifestDir == "" || !filepath.IsAbs(cfg.ManifestDir):
		return nil, fmt.Errorf("kubelet stand-in: ManifestDir must be an absolute path, got %q", cfg.ManifestDir)
	case cfg.CgroupParent != "" && !filepath.IsAbs(cfg.CgroupParent):
		return nil, fmt.Errorf("kubelet stand-in: CgroupParent must be an absolute path, got %q", cfg.CgroupParent)
	case cfg.RootDir == "" || !filepath.IsAbs(cfg.RootDir):
		return nil, fmt.Errorf("kubelet stand-in: RootDir must be an absolute path, got %q", cfg.RootDir)
	case cfg.NodeName == "":
		return nil, errors.New("kubelet stand-in: NodeName is required")
	case cfg.Images == nil && cfg.ImageMapFile == "":
		return nil, errors.New("kubelet stand-in: an image map (ImageMapFile or Images) is required")
	}
	return &Kubelet{
		cfg:       cfg,
		log:       cfg.Logger,
		store:     map[string]*SourcePod{},
		fileKey:   map[string]string{},
		pods:      map[string]*pod{},
		changed:   make(chan struct{}),
		relistNow: make(chan chan struct{}),
	}, nil
}

// Addr is the status endpoint's host:port, empty until Run is serving.
func (k *Kubelet) Addr() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.addr
}

// Run serves until ctx is done, then kills every pod (SIGTERM, grace,
// SIGKILL), waits until every container process has been reaped, and
// returns. It returns an error only when it cannot start: the root
// directory or the status listener fails.
func (k *Kubelet) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(k.cfg.RootDir, "logs"), 0o755); err != nil {
		return fmt.Errorf("kubelet stand-in root: %w", err)
	}
	ln, err := net.Listen("tcp", k.cfg.StatusAddr)
	if err != nil {
		return fmt.Errorf("kubelet stand-in status listener %s: %w", k.cfg.StatusAddr, err)
	}
	srv := &http.Server{Handler: k.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	k.mu.Lock()
	k.addr = ln.Addr().String()
	k.mu.Unlock()
	if _, err := durable.WriteFile(filepath.Join(k.cfg.RootDir, StatusAddrFile), []byte(k.addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("kubelet stand-in: %w", err)
	}
	k.log.Info("kubelet stand-in started", "manifestDir", k.cfg.ManifestDir, "node", k.cfg.NodeName, "status", k.addr,
		"relist", k.cfg.RelistInterval, "startDelay", k.cfg.StartDelay, "startLatency", k.cfg.StartLatency, "graceFloor", k.cfg.GraceFloor, "graceCap", k.cfg.GraceCap,
		"backoffBase", k.cfg.BackoffBase, "backoffCap", k.cfg.BackoffCap)

	events := make(chan fsnotify.Event, 256)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchDone sync.WaitGroup
	watchDone.Add(1)
	go func() { defer watchDone.Done(); k.watch(watchCtx, events) }()

	k.relist()
	tick := time.NewTicker(k.cfg.RelistInterval)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			k.relist()
		case ev := <-events:
			k.handleEvent(ev)
			k.mu.Lock()
			k.handled++
			k.notify()
			k.mu.Unlock()
		case done := <-k.relistNow:
			k.relist()
			close(done)
		}
	}
	stopWatch()
	watchDone.Wait()
	k.shutdown()
	return nil
}

// notify wakes every waiter. Called with mu.
func (k *Kubelet) notify() {
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *Kubelet) jitter(d time.Duration) time.Duration {
	if k.cfg.StartJitter <= 0 {
		return d
	}
	return d + time.Duration(rand.Float64()*k.cfg.StartJitter*float64(d))
}

// shutdown kills every pod and waits until all processes are reaped.
func (k *Kubelet) shutdown() {
	k.mu.Lock()
	k.stopping = true
	longest := time.Duration(0)
	for _, p := range k.pods {
		if p.phase == phasePending || p.phase == phaseRunning {
			k.terminate(p, "kubelet stand-in stopping")
		}
		if g := k.grace(p); g > longest {
			longest = g
		}
	}
	k.mu.Unlock()
	done := make(chan struct{})
	go func() { k.procs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(longest + 5*time.Second):
		k.log.Error("pods did not terminate after SIGKILL; giving up on reaping them", "waited", longest+5*time.Second)
	}
	k.mu.Lock()
	k.finished = true
	k.mu.Unlock()
	k.log.Info("kubelet stand-in stopped")
}

// killGroup signals process group pgid, logging anything but ESRCH.
func (k *Kubelet) killGroup(pgid int, sig syscall.Signal) {
	if pgid <= 1 {
		return
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		k.log.Error("signal process group", "pgid", pgid, "signal", sig.String(), "err", err)
	}
}

// WaitFor blocks until cond, evaluated on the current pod statuses after
// every change, is true, or until timeout; the error says what was
// awaited (what) and the last statuses seen.
func (k *Kubelet) WaitFor(what string, timeout time.Duration, cond func([]PodStatus) bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		k.mu.Lock()
		st := k.statusLocked()
		ch := k.changed
		k.mu.Unlock()
		if cond(st) {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline.C:
			return fmt.Errorf("kubelet stand-in: timed out after %s waiting for %s; pods: %s", timeout, what, summary(st))
		}
	}
}

func summary(st []PodStatus) string {
	if len(st) == 0 {
		return "none"
	}
	s := ""
	for i, p := range st {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s uid=%.8s %s pid=%d restarts=%d", p.Key, p.UID, p.State, p.PID, p.Restarts)
	}
	return s
}

// Pods is the status of every pod worker, sorted by key, then by creation.
func (k *Kubelet) Pods() []PodStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.statusLocked()
}

func (k *Kubelet) statusLocked() []PodStatus {
	out := make([]PodStatus, 0, len(k.pods))
	for _, p := range k.pods {
		out = append(out, p.status())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}
