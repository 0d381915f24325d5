package cli

import "encoding/json"

// MarshalJSON writes the final line of run, resume and rollback
// (docs/schemas/run.json#/$defs/final) with every field: the engine's
// result through resultJSON, error null when there is none. A result the
// engine left without an outcome (it failed before or outside a
// transaction) takes the command's.
func (f finalLine) MarshalJSON() ([]byte, error) {
	res := resultOut(f.Result)
	if res.Outcome == "" {
		res.Outcome = f.Outcome
	}
	return json.Marshal(struct {
		Result   resultJSON `json:"result"`
		Outcome  string     `json:"outcome"`
		ExitCode int        `json:"exitCode"`
		Error    *string    `json:"error"`
	}{res, f.Outcome, f.ExitCode, optional(f.Error)})
}

// planChangeJSON is one manifest plan would change.
type planChangeJSON struct {
	Component     string `json:"component"`
	Path          string `json:"path"`
	New           bool   `json:"new"`
	EditedByHand  bool   `json:"editedByHand"`
	InputsChanged bool   `json:"inputsChanged"`
	// Replacement and ReplacementWhy are null for a component that
	// cannot surge at all, and the reason null for one that will.
	Replacement    *string `json:"replacement"`
	ReplacementWhy *string `json:"replacementWhy"`
	Diff           string  `json:"diff"`
}

// MarshalJSON writes plan's output (docs/schemas/plan.json) with every
// field: message null unless there is nothing to do, ignoredChecks [] when
// no check was let through, failedChecks [] unless checks refuse it (then
// the error line follows).
func (p planReport) MarshalJSON() ([]byte, error) {
	changes := []planChangeJSON{}
	for _, c := range p.Changes {
		changes = append(changes, planChangeJSON{Component: c.Component, Path: c.Path, New: c.New, EditedByHand: c.EditedByHand, InputsChanged: c.InputsChanged,
			Replacement: optional(c.Replacement), ReplacementWhy: optional(c.ReplacementWhy), Diff: c.Diff})
	}
	return json.Marshal(struct {
		From          string           `json:"from"`
		To            string           `json:"to"`
		Nothing       bool             `json:"nothingToDo"`
		Message       *string          `json:"message"`
		EtcdBackup    bool             `json:"etcdBackup"`
		EtcdSnapshot  string           `json:"etcdSnapshot"`
		IgnoredChecks []checkJSON      `json:"ignoredChecks"`
		FailedChecks  []checkJSON      `json:"failedChecks"`
		Changes       []planChangeJSON `json:"changes"`
		Images        []planImage      `json:"images"`
	}{p.From, p.To, p.Nothing, optional(p.Message), p.EtcdBackup, p.EtcdSnapshot, checksJSON(p.IgnoredChecks), checksJSON(p.FailedChecks), changes, p.Images})
}
