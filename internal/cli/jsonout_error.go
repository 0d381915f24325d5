package cli

import (
	"encoding/json"
	"io"
	"strings"
)

// errorLine is the last line on stdout of a command that exits non-zero
// with --output json (docs/schemas/error.json): a script reads the outcome
// from stdout alone, as it reads every other result.
type errorLine struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	// Message is what stderr says, advice included.
	Message string `json:"message"`
	// Code is the exit code; Kind names it (errorKinds).
	Code int    `json:"code"`
	Kind string `json:"kind"`
}

// errorKinds names each exit code but 0 in an error line.
var errorKinds = map[int]string{
	ExitError:          "error",
	ExitUsage:          "usage",
	ExitRolledBack:     "rolled-back",
	ExitRollbackFailed: "rollback-failed",
	ExitBusy:           "busy",
	ExitInterrupted:    "interrupted",
}

// writeErrorJSON writes the error line for msg and code to stdout when the
// command line asks for JSON (g.output, or args when the command line did
// not parse far enough to set it). Main calls it for every non-zero exit.
func writeErrorJSON(g *globals, args []string, stdout io.Writer, msg string, code int) {
	if !jsonRequested(g, args) {
		return
	}
	kind, ok := errorKinds[code]
	if !ok {
		kind = "error"
	}
	b, err := json.Marshal(errorLine{errorJSON{Message: msg, Code: code, Kind: kind}})
	if err != nil {
		return
	}
	_, _ = stdout.Write(append(b, '\n'))
}

// jsonRequested reports whether the command asked for --output json: the
// parsed flag, or when parsing stopped before it (an unknown command or
// flag), the last -o/--output in args before "--".
func jsonRequested(g *globals, args []string) bool {
	if g != nil && g.output != "" && g.output != "text" {
		return g.json()
	}
	want := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return want
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				want = args[i+1] == "json"
				i++
			}
		case strings.HasPrefix(a, "--output="):
			want = strings.TrimPrefix(a, "--output=") == "json"
		case strings.HasPrefix(a, "-o"):
			want = strings.TrimPrefix(strings.TrimPrefix(a, "-o"), "=") == "json"
		}
	}
	return want
}
