package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every transaction flag has a row under "## Transaction flags" giving its
// default, is taken by exactly init, render, run, apply, restart, stop, start, resume and rollback
// (init and render drive a transaction on a live node), and every row of
// the table is one of them.
func TestDocsTransactionFlags(t *testing.T) {
	root := newRoot(&globals{})
	_, rows := flagRows(t, "Transaction flags")
	for _, name := range txnFlags {
		var takers []string
		for _, c := range commands(root) {
			if c.LocalFlags().Lookup(name) != nil {
				takers = append(takers, c.Name())
			}
		}
		if !slices.Equal(takers, []string{"init", "render", "run", "finish", "apply", "restart", "stop", "start", "resume", "rollback"}) {
			t.Errorf("--%s is taken by %v, want init, render, run, finish, apply, restart, stop, start, resume and rollback", name, takers)
		}
		f := find(root, "run").Flags().Lookup(name)
		cells, ok := rows[name]
		if !ok {
			t.Errorf("%s: transaction flag --%s has no row under Transaction flags", cliDoc, name)
			continue
		}
		if len(cells) < 2 || !sameDefault(f, strings.Trim(cells[1], "`")) {
			t.Errorf("%s: the Transaction flags row of --%s does not give its default %q", cliDoc, name, f.DefValue)
		}
	}
	for name := range rows {
		if !slices.Contains(txnFlags, name) {
			t.Errorf("%s: the Transaction flags table has --%s, which is no transaction flag", cliDoc, name)
		}
	}
}

// The Configuration section names every key the config file takes, and
// each key is a flag of some command.
func TestDocsConfigKeys(t *testing.T) {
	root := newRoot(&globals{})
	text, _ := chapter(t, readDocSections(t, cliDoc), "Configuration")
	for _, k := range configKeys {
		if !strings.Contains(text, "`"+k+"`") && !slices.Contains(txnFlags, k) {
			t.Errorf("%s: Configuration does not name the key `%s`", cliDoc, k)
		}
		var found *pflag.Flag
		for _, c := range append(commands(root), root) {
			if f := c.Flag(k); f != nil {
				found = f
			}
		}
		if found == nil {
			t.Errorf("config key %s is no flag of any command", k)
		}
	}
}
