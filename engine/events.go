package engine

// Progress events: one per step, for the CLI's lines and JSON.

import (
	"time"

	"github.com/ciq/stratum-upgrade/journal"
)

func (e *Engine) event(txn string, p journal.Phase, step, comp, waiting, msg string) {
	ev := Event{Time: time.Now(), Txn: txn, Phase: string(p), Step: step, Component: comp, Waiting: waiting, Message: msg}
	e.log.Info(msg, "txn", txn, "phase", p, "step", step, "component", comp)
	e.emit(ev)
}

// Event is one progress report of a transaction.
type Event struct {
	Time      time.Time `json:"time"`
	Txn       string    `json:"txn"`
	Phase     string    `json:"phase"`
	Step      string    `json:"step"`
	Component string    `json:"component,omitempty"`
	// Waiting says what the engine now waits for, when it waits.
	Waiting string `json:"waitingFor,omitempty"`
	Message string `json:"message"`
}
