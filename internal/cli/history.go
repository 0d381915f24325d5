package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newHistoryCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "history [TXN]",
		Short: "List the transactions in the journal, newest first, or show one in full",
		Long: `history lists every transaction in the journal, newest first: id, kind, phase,
start, duration, versions, the components whose manifests it wrote and why it
rolled back. On a terminal the reason is cut to the terminal's width (also
when $COLUMNS is set); piped, lines are whole.

With a transaction id it shows that transaction in full: versions, times, the
components it planned to change and those it wrote, its snapshot and etcd
backup, the whole reason, the pre-flight checks it was let through with, the
state of each component after a failed rollback, and every journaled step
(docs/journal.md explains them). The journal is opened read-only.`,
		Args: cobra.MaximumNArgs(1),
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return g.showTxn(args[0])
			}
			return g.history(limit)
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many transactions (0: all)")
	return cmd
}

// historyReport is history's output (docs/schemas/history.json).
type historyReport struct {
	Journal      string    `json:"journal"`
	NoJournal    bool      `json:"noJournal"`
	Transactions []txnInfo `json:"transactions"`
}

func (g *globals) history(limit int) error {
	rep := historyReport{Journal: g.journalPath(), Transactions: []txnInfo{}}
	ok, err := g.journalExists()
	if err != nil {
		return err
	}
	if ok {
		j, err := g.openJournal(true)
		if err != nil {
			return err
		}
		defer j.Close()
		hist, err := j.History(limit)
		if err != nil {
			return err
		}
		for i := range hist {
			info, err := txnView(j, &hist[i])
			if err != nil {
				return err
			}
			rep.Transactions = append(rep.Transactions, info)
		}
	}
	rep.NoJournal = !ok
	if g.json() {
		return g.write(rep)
	}
	switch {
	case rep.NoJournal:
		fmt.Fprintf(g.stdout, "no transactions: no journal at %s (nothing was imported or upgraded on this node)\n", rep.Journal)
		return nil
	case len(rep.Transactions) == 0:
		fmt.Fprintln(g.stdout, "no transactions")
		return nil
	}
	return printHistory(g.stdout, rep.Transactions, textWidth(g.stdout), g.cmdline("history TXN"))
}

// printHistory writes the history table. width > 0 cuts each REASON so
// that its line fits in width columns (but leaves at least minReason of
// it), with a note that `history TXN` has the whole text.
func printHistory(w io.Writer, txns []txnInfo, width int, more string) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tPHASE\tSTARTED\tDURATION\tFROM\tTO\tWRITTEN\tREASON")
	for _, t := range txns {
		reason := strings.Join(strings.Fields(orDash(t.Reason)), " ") // one line
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Phase, t.Started.Format(time.RFC3339), t.Duration,
			orDash(t.From), orDash(t.To), list(t.Written), reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	at := strings.Index(lines[0], "REASON") // tabwriter puts every reason there
	cut := false
	for _, line := range lines {
		if width > 0 && utf8.RuneCountInString(strings.TrimSuffix(line, "\n")) > width && at < len(line) {
			line, cut = line[:at]+cutText(strings.TrimSuffix(line[at:], "\n"), max(width-at, minReason))+"\n", true
		}
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
	}
	if cut {
		_, err := fmt.Fprintf(w, "(reasons cut to the terminal's width: `%s` shows the whole)\n", more)
		return err
	}
	return nil
}

// minReason is how much of a reason a cut leaves on a narrow terminal.
const minReason = 20

// cutText is s cut to n runes, the last one "…" when s is longer.
func cutText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// textWidth is the width to cut history's lines to: the terminal's when w
// is one, else $COLUMNS when set to a number, else 0: no cut, so that a
// script or a pager reading a pipe gets whole lines.
func textWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil && width > 0 {
			return width
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 0
}
