package cli

import (
	"strings"
	"testing"
)

// Every command has its conventions (group, exit codes, examples): a new
// command without them would be listed outside the workflow groups with
// no exit codes in its help.
func TestEveryCommandHasConventions(t *testing.T) {
	root := newRoot(&globals{})
	for _, c := range commands(root) {
		cc, ok := conventionsOf[c.Name()]
		if !ok {
			t.Errorf("command %s has no entry in conventionsOf", c.Name())
			continue
		}
		if c.GroupID == "" || c.Example == "" || !strings.HasSuffix(c.Long, exitLine(cc.exits)) {
			t.Errorf("command %s: group %q, example %q, long ends %q", c.Name(), c.GroupID, c.Example, c.Long[max(0, len(c.Long)-80):])
		}
		if strings.Contains(c.Long, exitCodesHelp) {
			t.Errorf("command %s repeats the root's exit-code block", c.Name())
		}
		if len(cc.exits) == 0 || cc.exits[0] != ExitOK {
			t.Errorf("command %s: exit codes %v do not start with 0", c.Name(), cc.exits)
		}
	}
}
