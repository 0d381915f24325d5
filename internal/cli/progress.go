package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/engine"
)

// Progress is the content of <state-dir>/progress.json: what the
// stratum-upgrade driving a transaction (run, resume, rollback) did last.
// It exists because the journal is locked while a transaction is driven,
// so `status` cannot read it then; status shows this file instead. It is
// replaced atomically on every engine event and once more when the command
// stops driving (a command with nothing to do never writes it); it is
// informational only and never read back by the engine.
type Progress struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Event is the last engine event, if any.
	Event *engine.Event `json:"event,omitempty"`
	// Finished is set when the command stopped driving; Outcome says how it
	// ended (committed, rolled-back, rollback-failed, interrupted, error,
	// nothing) and Error gives the error, if any.
	Finished bool   `json:"finished"`
	Outcome  string `json:"outcome,omitempty"`
	Error    string `json:"error,omitempty"`
}

// writeProgress replaces the progress file. A failure is logged, never
// fatal: the journal, not this file, is the record.
func (r *reporter) writeProgress(ev *engine.Event, outcome, errMsg string) {
	p := Progress{PID: r.pid, Command: r.command, Started: r.start, Updated: time.Now(), Event: ev}
	if ev == nil && r.last != nil {
		p.Event = r.last
	}
	if ev != nil {
		r.last = ev
	}
	if outcome != "" {
		p.Finished, p.Outcome, p.Error = true, outcome, errMsg
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return
	}
	if _, err := durable.WriteFile(r.g.progressPath(), append(b, '\n'), 0o600); err != nil {
		r.g.log.Warn("progress file not written (status cannot show progress while the journal is locked)", "path", r.g.progressPath(), "err", err)
	}
}

// readProgress reads the progress file; nil without error when absent.
func readProgress(path string) (*Progress, error) {
	b, _, err := durable.ReadRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("progress file %s: %w", path, err)
	}
	var p Progress
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("progress file %s: %w", path, err)
	}
	return &p, nil
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
