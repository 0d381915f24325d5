// Watching the manifest directory: inotify events, relists into the pod
// store, and reconciling the pod workers with it.

package kubeletsim

import (
	"context"
	"errors"
	"os"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watch feeds fsnotify events on the manifest directory into events,
// re-establishing the watch if the directory is missing or replaced.
func (k *Kubelet) watch(ctx context.Context, events chan<- fsnotify.Event) {
	for ctx.Err() == nil {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			k.log.Error("inotify unavailable; relying on relist", "err", err)
			return
		}
		if err := w.Add(k.cfg.ManifestDir); err != nil {
			w.Close()
			k.log.Warn("cannot watch manifest directory; will retry", "dir", k.cfg.ManifestDir, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(k.cfg.RelistInterval):
			}
			continue
		}
		k.pump(ctx, w, events)
		w.Close()
	}
}

func (k *Kubelet) pump(ctx context.Context, w *fsnotify.Watcher, events chan<- fsnotify.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Name == k.cfg.ManifestDir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				k.log.Warn("manifest directory went away; re-watching", "dir", k.cfg.ManifestDir)
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			k.log.Error("inotify error", "err", err)
		}
	}
}

// handleEvent is kubelet's consumeWatchEvent for one inotify event.
func (k *Kubelet) handleEvent(ev fsnotify.Event) {
	if hidden(ev.Name) {
		return
	}
	switch {
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		k.mu.Lock()
		defer k.mu.Unlock()
		key, ok := k.fileKey[ev.Name]
		if !ok {
			k.log.Info("file removed; it held no pod", "file", ev.Name, "op", ev.Op.String())
			return
		}
		delete(k.fileKey, ev.Name)
		if _, ok := k.store[key]; ok {
			k.log.Info("file removed; deleting its pod", "file", ev.Name, "key", key, "op", ev.Op.String())
			delete(k.store, key)
			k.reconcile()
		}
	case ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) || ev.Has(fsnotify.Chmod):
		sp, err := ReadPodFile(ev.Name, k.cfg.NodeName)
		k.mu.Lock()
		defer k.mu.Unlock()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return
			}
			k.log.Error("could not process manifest file on event; keeping the current pod until the next relist", "file", ev.Name, "op", ev.Op.String(), "err", err)
			return
		}
		k.fileKey[sp.File] = sp.Key
		if old, ok := k.store[sp.Key]; ok && old.UID == sp.UID {
			k.log.Debug("manifest event: pod unchanged", "file", ev.Name, "key", sp.Key, "uid", sp.UID)
			return
		}
		k.log.Info("manifest event: pod updated", "file", ev.Name, "op", ev.Op.String(), "key", sp.Key, "uid", sp.UID)
		k.store[sp.Key] = sp
		k.reconcile()
	}
}

// relist is kubelet's listConfig: every visible entry, in sort order, the
// last file winning a key; the result replaces the store.
func (k *Kubelet) relist() {
	paths, err := ListDir(k.cfg.ManifestDir)
	if err != nil {
		k.log.Error("relist failed", "dir", k.cfg.ManifestDir, "err", err)
		return
	}
	next := map[string]*SourcePod{}
	from := map[string]string{}
	for _, p := range paths {
		sp, err := ReadPodFile(p, k.cfg.NodeName)
		switch {
		case errors.Is(err, ErrDirectory):
			k.log.Info("not recursing into manifest path", "path", p)
			continue
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			k.log.Error("could not process manifest file", "file", p, "err", err)
			continue
		}
		if prev, ok := next[sp.Key]; ok {
			k.log.Warn("two files hold one pod name; the later file wins", "key", sp.Key, "loser", prev.File, "winner", sp.File)
		}
		next[sp.Key] = sp
		from[sp.File] = sp.Key
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.relists++
	defer k.notify()
	for f, key := range from {
		k.fileKey[f] = key
	}
	same := len(next) == len(k.store)
	for key, sp := range next {
		if old, ok := k.store[key]; !ok || old.UID != sp.UID {
			same = false
		}
	}
	if same {
		return
	}
	for key, old := range k.store {
		if sp, ok := next[key]; !ok {
			k.log.Info("relist: pod no longer in the manifest directory", "key", key, "file", old.File)
		} else if sp.UID != old.UID {
			k.log.Info("relist: pod changed", "key", key, "file", sp.File, "uid", sp.UID, "oldFile", old.File, "oldUID", old.UID)
		}
	}
	for key, sp := range next {
		if _, ok := k.store[key]; !ok {
			k.log.Info("relist: new pod", "key", key, "file", sp.File, "uid", sp.UID)
		}
	}
	k.store = next
	k.reconcile()
}

// reconcile brings the pod workers in line with the store. Called with mu.
func (k *Kubelet) reconcile() {
	if k.stopping {
		return
	}
	desired := map[string]*SourcePod{}
	for _, sp := range k.store {
		desired[sp.UID] = sp
	}
	for uid, p := range k.pods {
		if _, ok := desired[uid]; ok {
			continue
		}
		switch p.phase {
		case phasePending, phaseRunning:
			k.terminate(p, "pod removed or replaced in the manifest directory")
		case phaseRejected:
			k.log.Info("dropping a rejected pod: its manifest is gone or changed", "key", p.src.Key, "uid", uid)
			delete(k.pods, uid)
		}
	}
	// kubelet's config sends the removes before the adds, and
	// HandlePodAdditions admits the adds one by one, each against the
	// pods admitted so far; here in the order of their files.
	var added []*SourcePod
	for uid, sp := range desired {
		if _, ok := k.pods[uid]; !ok {
			added = append(added, sp)
		}
	}
	sort.Slice(added, func(i, j int) bool { return added[i].File < added[j].File })
	for _, sp := range added {
		p := k.newPod(sp)
		k.pods[sp.UID] = p
		if err := Admit(sp, k.activeLocked(desired)); err != nil {
			k.reject(p, err)
			continue
		}
		k.tryStart(p)
	}
	for uid := range desired {
		p := k.pods[uid]
		if p.phase == phaseTerminating || p.phase == phaseTerminated {
			if !p.restartRequested {
				k.log.Info("terminated pod is wanted again; it restarts once its worker is cleaned up", "key", p.src.Key, "uid", uid)
			}
			p.restartRequested = true
		}
	}
	k.notify()
}
