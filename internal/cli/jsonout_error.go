package cli

import (
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
	format := outputRequested(g, args)
	if format != "json" && format != "yaml" {
		return
	}
	kind, ok := errorKinds[code]
	if !ok {
		kind = "error"
	}
	_ = writeAs(stdout, format, errorLine{errorJSON{Message: msg, Code: code, Kind: kind}})
}

// outputRequested is the --output format the command asked for: the
// parsed flag, or when parsing stopped before it (an unknown command or
// flag), the last -o/--output in args before "--".
func outputRequested(g *globals, args []string) string {
	if g != nil && g.output != "" && g.output != "text" {
		return g.output
	}
	want := "text"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return want
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				want = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--output="):
			want = strings.TrimPrefix(a, "--output=")
		case strings.HasPrefix(a, "-o"):
			want = strings.TrimPrefix(strings.TrimPrefix(a, "-o"), "=")
		}
	}
	return want
}
