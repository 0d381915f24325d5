package kubeletsim

import (
	"encoding/json"
	"net/http"
	"time"
)

// Kinds of Event.
const (
	EventHeld        = "held"        // a pod must wait for an older pod of its name
	EventStart       = "start"       // a container process started
	EventStartFailed = "startFailed" // a container could not start (image, env, exec)
	EventExit        = "exit"        // a container process was reaped
	EventBackoff     = "backoff"     // a restart's CrashLoopBackOff decision: waited, or already elapsed
	EventKill        = "kill"        // a pod is being killed (SIGTERM sent)
	EventSIGKILL     = "sigkill"     // the grace period ran out
	EventTerminated  = "terminated"  // every process of a killed pod is reaped
	EventRejected    = "rejected"    // admission refused a new pod (NodePorts): it never runs
)

// Event is one decision or observation of the stand-in, in the order made.
// History keeps the last maxHistory; GET /events serves them.
type Event struct {
	Seq       int           `json:"seq"`
	Time      time.Time     `json:"time"`
	Kind      string        `json:"kind"`
	Key       string        `json:"key"`
	UID       string        `json:"uid"`
	File      string        `json:"file,omitempty"`
	Container string        `json:"container,omitempty"`
	PID       int           `json:"pid,omitempty"`
	Backoff   time.Duration `json:"backoff,omitempty"`
	Detail    string        `json:"detail,omitempty"`
}

const maxHistory = 10000

// record appends an event. Called with mu.
func (k *Kubelet) record(kind string, p *pod, c *container, pid int, backoff time.Duration, detail string) {
	e := Event{Time: time.Now(), Kind: kind, Key: p.src.Key, UID: p.src.UID, File: p.src.File, PID: pid, Backoff: backoff, Detail: detail}
	if c != nil {
		e.Container = c.spec.Name
		if kind == EventStart {
			e.Time = c.lastStart // the moment the start was decided, which backoff is measured from
		}
	}
	if n := len(k.history); n > 0 {
		e.Seq = k.history[n-1].Seq + 1
	}
	k.history = append(k.history, e)
	if len(k.history) > maxHistory {
		k.history = append([]Event(nil), k.history[len(k.history)-maxHistory:]...)
	}
}

// History returns a copy of the recorded events, oldest first.
func (k *Kubelet) History() []Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Event(nil), k.history...)
}

func (k *Kubelet) serveEvents(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(k.History())
}
