package cli

// The wire types of --output json that wrap the library's types. The
// library's own JSON tags (the journal's storage format, the engine's
// events) omit empty fields; the command's output does not: every field a
// schema in docs/schemas documents is always there, null when unset, []
// when empty (docs/cli.md#json-output).

import (
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/versions"
)

// checkJSON is a failed pre-flight check.
type checkJSON struct {
	Check     string  `json:"check"`
	Component *string `json:"component"`
	Message   string  `json:"message"`
}

func checksJSON(fs []versions.Finding) []checkJSON {
	out := []checkJSON{}
	for _, f := range fs {
		out = append(out, checkJSON{Check: f.Check, Component: optional(f.Component), Message: f.Message})
	}
	return out
}

// processJSON is a process and its start time in clock ticks since boot.
type processJSON struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

func processesJSON(ps []proc.Process) []processJSON {
	out := []processJSON{}
	for _, p := range ps {
		out = append(out, processJSON{PID: p.PID, StartTicks: p.StartTicks})
	}
	return out
}

// markJSON is a moment on the node: ticks since boot and the boot id.
type markJSON struct {
	Ticks  uint64 `json:"ticks"`
	BootID string `json:"bootID"`
}

// recordJSON is one journaled record (docs/journal.md).
type recordJSON struct {
	Seq       uint64        `json:"seq"`
	Time      time.Time     `json:"time"`
	BootID    string        `json:"bootID"`
	Phase     journal.Phase `json:"phase"`
	Step      *string       `json:"step"`
	Component *string       `json:"component"`
	ProcMark  *markJSON     `json:"procMark"`
	Stamp     *string       `json:"stamp"`
	Processes []processJSON `json:"processes"`
	AsideDir  *string       `json:"asideDir"`
	// EtcdData and Why are a rollback's decision about etcd's data
	// (step etcd-data) and what it rests on (also etcd-downgraded's).
	EtcdData *string `json:"etcdData"`
	Why      *string `json:"why"`
}

func recordOut(r journal.Record) recordJSON {
	out := recordJSON{
		Seq: r.Seq, Time: r.Time, BootID: r.BootID, Phase: r.Phase, Step: optional(string(r.Step)),
		Component: optional(r.Component), Stamp: optional(r.Stamp), Processes: processesJSON(r.Processes), AsideDir: optional(r.AsideDir),
		EtcdData: optional(r.EtcdData), Why: optional(r.Why),
	}
	if r.ProcMark != nil {
		out.ProcMark = &markJSON{Ticks: r.ProcMark.Ticks, BootID: r.ProcMark.BootID}
	}
	return out
}

func recordsOut(recs []journal.Record) []recordJSON {
	out := []recordJSON{}
	for _, r := range recs {
		out = append(out, recordOut(r))
	}
	return out
}

// eventJSON is one engine event: one line of run, resume and rollback.
type eventJSON struct {
	Time      time.Time `json:"time"`
	Txn       string    `json:"txn"`
	Phase     string    `json:"phase"`
	Step      string    `json:"step"`
	Component *string   `json:"component"`
	Waiting   *string   `json:"waitingFor"`
	Message   string    `json:"message"`
}

func eventOut(ev engine.Event) eventJSON {
	return eventJSON{Time: ev.Time, Txn: ev.Txn, Phase: ev.Phase, Step: ev.Step, Component: optional(ev.Component), Waiting: optional(ev.Waiting), Message: ev.Message}
}

// stepTimeJSON is how long one component's step took.
type stepTimeJSON struct {
	Component string        `json:"component"`
	Phase     string        `json:"phase"`
	Elapsed   time.Duration `json:"elapsedNs"`
}

// resultJSON is the engine's result of a driven transaction.
type resultJSON struct {
	Txn     *string `json:"txn"`
	Outcome string  `json:"outcome"`
	Reason  *string `json:"reason"`
	// Planned is every component whose manifest the transaction was to
	// change (history's planned; history TXN also lists the written ones).
	Planned []string       `json:"planned"`
	Elapsed time.Duration  `json:"elapsedNs"`
	Steps   []stepTimeJSON `json:"steps"`
}

func resultOut(res engine.Result) resultJSON {
	out := resultJSON{Txn: optional(res.Txn), Outcome: string(res.Outcome), Reason: optional(res.Reason), Planned: nonNil(res.Changed), Elapsed: res.Elapsed, Steps: []stepTimeJSON{}}
	for _, s := range res.Steps {
		out.Steps = append(out.Steps, stepTimeJSON{Component: s.Component, Phase: s.Phase, Elapsed: s.Elapsed})
	}
	return out
}

// progressJSON is the progress file of the command that holds the journal,
// as status shows it.
type progressJSON struct {
	PID      int        `json:"pid"`
	Command  string     `json:"command"`
	Started  time.Time  `json:"started"`
	Updated  time.Time  `json:"updated"`
	Event    *eventJSON `json:"event"`
	Finished bool       `json:"finished"`
	Outcome  *string    `json:"outcome"`
	Error    *string    `json:"error"`
}

func progressOut(p *Progress) *progressJSON {
	if p == nil {
		return nil
	}
	out := &progressJSON{PID: p.PID, Command: p.Command, Started: p.Started, Updated: p.Updated, Finished: p.Finished, Outcome: optional(p.Outcome), Error: optional(p.Error)}
	if p.Event != nil {
		ev := eventOut(*p.Event)
		out.Event = &ev
	}
	return out
}
