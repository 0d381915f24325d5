package kubeletmodel

// Delays: the model acts on a change of the directory at the sync that sees
// it, unless a test holds a file or sets a lag. Both stand for what a real
// kubelet does between a write and its action on it (the pod worker's hold,
// a slow sync loop), so that the engine's reasoning about marks, and what a
// crash between a write and kubelet's action leaves, can be tested.

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/proc"
)

// Hold makes the model ignore every change of the manifest file path (a
// path in the directory) until Release: the pod it runs keeps running as it
// is, a new pod from it does not start, its removal kills nothing. That is
// kubelet never acting on the file (a wait for it times out).
func (k *Kubelet) Hold(path string) { k.held[path] = true }

// Release ends Hold: the next sync acts on the file as it is then.
func (k *Kubelet) Release(path string) { delete(k.held, path) }

// SetLag makes the model act on a change only at the (n+1)-th sync that
// sees it (n = 0, the default, acts at once). Every wait syncs up to n+1
// times before its deadline is taken as passed, so a wait still sees the
// change through; a single look (Mark, PIDs, Replaced, Active) may not.
func (k *Kubelet) SetLag(n int) {
	if n < 0 {
		n = 0
	}
	k.lag = n
}

// RestartContainer restarts the running processes of binary in place, as
// kubelet restarts a container after a failed liveness probe or an OOM
// kill: the same pod (same UID), a new process with a new start tick. It
// does not sync. It reports how many processes it restarted.
func (k *Kubelet) RestartContainer(binary string) int {
	n := 0
	for _, key := range sortedKeys(k.pods) {
		p := k.pods[key]
		for _, c := range p.containers {
			if c.proc != nil && c.binary == filepath.Base(binary) {
				k.logf("exit %s pid %d (liveness); restarted", p.key, c.proc.PID)
				k.run(p, c)
				n++
			}
		}
	}
	return n
}

// delay applies holds and the lag to want, the pods the directory asks for
// by key: for a change the model does not act on yet, want is set back to
// what runs (the running pod kept, a new one not started).
func (k *Kubelet) delay(want map[string]*kubeletsim.SourcePod) {
	keys := map[string]bool{}
	for key := range k.pods {
		keys[key] = true
	}
	for key := range want {
		keys[key] = true
	}
	for _, key := range sortedKeys(keys) {
		p, w := k.pods[key], want[key]
		changed := (p == nil) != (w == nil) || p != nil && w != nil && p.uid != w.UID
		if !changed {
			delete(k.pending, key)
			continue
		}
		held := p != nil && k.held[p.file] || w != nil && k.held[w.File]
		if !held {
			if k.pending[key]++; k.pending[key] > k.lag {
				delete(k.pending, key)
				continue
			}
		}
		what := "held"
		if !held {
			what = fmt.Sprintf("lag %d/%d", k.pending[key], k.lag)
		}
		if p != nil {
			want[key] = &kubeletsim.SourcePod{Key: key, UID: p.uid, File: p.file}
			k.logf("not yet acting on a change of %s (%s)", key, what)
		} else {
			delete(want, key)
			k.logf("not yet starting %s (%s)", key, what)
		}
	}
}

// await checks until check (which syncs) passes, at most lag+1 times: a
// wait sees a lagging change through. It returns the last failure.
func (k *Kubelet) await(check func() error) error {
	var why error
	for i := 0; i <= k.lag; i++ {
		if why = check(); why == nil {
			return nil
		}
	}
	return why
}

func describeProcs(ps []proc.Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("pid %d (started tick %d)", p.PID, p.StartTicks)
	}
	return strings.Join(parts, ", ")
}
