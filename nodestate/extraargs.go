package nodestate

// Extra args: the values of one flag, their YAML form, and the command-line
// order of a component's extra args.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// ArgValues is the value of one extra arg: one value, or, for a flag given
// more than once, every value in command-line order. kubeadm v1beta4's
// extraArgs allow a flag several times, and some flags accumulate: two
// --service-account-issuer keep an old issuer accepted while tokens
// rotate (the first one issues). One value is written as a string, the
// form every node state file has had; several as a list of strings.
type ArgValues []string

// Last is the value a flag parsed as a single value ends with: the last
// one given.
func (v ArgValues) Last() string {
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// MarshalJSON writes one value as a string and several as a list, so that
// a state without repeated flags is written as before.
func (v ArgValues) MarshalJSON() ([]byte, error) {
	if len(v) == 1 {
		return json.Marshal(v[0])
	}
	return json.Marshal([]string(v))
}

// UnmarshalJSON reads a string or a list. A number, a boolean or null is
// read as the text a string field always made of it ("3", "true", ""),
// so files that left a number unquoted keep their meaning.
func (v *ArgValues) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var raw []json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			return err
		}
		out := make(ArgValues, len(raw))
		for i, r := range raw {
			s, err := scalarText(r)
			if err != nil {
				return err
			}
			out[i] = s
		}
		*v = out
		return nil
	}
	s, err := scalarText(b)
	if err != nil {
		return err
	}
	*v = ArgValues{s}
	return nil
}

// scalarText is a JSON scalar as a flag's value.
func scalarText(b json.RawMessage) (string, error) {
	switch {
	case string(b) == "null":
		return "", nil
	case len(b) > 0 && b[0] == '"':
		var s string
		err := json.Unmarshal(b, &s)
		return s, err
	case len(b) > 0 && (b[0] == '{' || b[0] == '['):
		return "", fmt.Errorf("an extra arg's value must be a string or a list of strings, got %s", b)
	}
	return string(b), nil // a number or a boolean, as written
}

// Arg is one --name=value argument of a command line.
type Arg struct {
	Name, Value string
}

// ExtraArgList is comp's extra args as they follow the rendered flags on
// the command line, one Arg per value. ExtraArgsOrder places them: a flag
// it lists once has all its values there, in order; a flag it lists once
// per value takes its next value at each place (kubeadm writes repeated
// extraArgs where its configuration lists them, which may be apart). The
// flags it does not list follow, sorted by name, each with its values
// together.
func (st *NodeState) ExtraArgList(comp string) []Arg {
	extra := st.ExtraArgs[comp]
	order := st.ExtraArgsOrder[comp]
	listed := map[string]int{}
	for _, k := range order {
		listed[k]++
	}
	next := map[string]int{} // values of each flag already placed
	var out []Arg
	place := func(k string, values []string) {
		for _, v := range values {
			out = append(out, Arg{Name: k, Value: v})
		}
		next[k] += len(values)
	}
	for _, k := range order {
		values, ok := extra[k]
		switch {
		case !ok || next[k] >= len(values):
			// Not an extra arg, or placed already (a state Validate
			// refuses lists a flag too often).
		case listed[k] > 1 && listed[k] == len(values):
			place(k, values[next[k]:next[k]+1])
		default:
			place(k, values[next[k]:])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if listed[k] == 0 {
			place(k, extra[k])
		}
	}
	return out
}

// SetExtraArg sets comp's extra arg name to values (one, or several for a
// flag given more than once), making the maps it needs.
func (st *NodeState) SetExtraArg(comp, name string, values ...string) {
	if st.ExtraArgs == nil {
		st.ExtraArgs = map[string]map[string]ArgValues{}
	}
	if st.ExtraArgs[comp] == nil {
		st.ExtraArgs[comp] = map[string]ArgValues{}
	}
	st.ExtraArgs[comp][name] = slices.Clone(values)
}

// validateExtraArgs checks extraArgs and extraArgsOrder, reporting each
// invalid field to bad.
func (st *NodeState) validateExtraArgs(roster []string, bad func(field, format string, a ...any)) {
	for _, c := range slices.Sorted(maps.Keys(st.ExtraArgs)) {
		if !slices.Contains(roster, c) {
			bad("extraArgs."+c, "not a component this node runs")
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(st.ExtraArgs[c])) {
			field := "extraArgs." + c + "." + k
			switch owner, owned := ownedEtcdFlags[k]; {
			case !flagName.MatchString(k):
				bad(field, "must be a flag name without leading dashes")
			case c == Etcd && owned:
				bad(field, "set by the node state's %s: the etcd backup and restore use that field, so it cannot be overridden here", owner)
			}
			if len(st.ExtraArgs[c][k]) == 0 {
				bad(field, `an empty list: give a value (the empty value is ""), or a list of the values of a flag given more than once`)
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(st.ExtraArgsOrder)) {
		order := st.ExtraArgsOrder[c]
		for i, k := range order {
			field := fmt.Sprintf("extraArgsOrder.%s[%d]", c, i)
			values, ok := st.ExtraArgs[c][k]
			n := countOf(order, k)
			switch {
			case !ok:
				bad(field, "%q is not an extra arg of %s (extraArgs.%s)", k, c, c)
			case n > 1 && n != len(values) && countOf(order[:i], k) == 1:
				bad(field, "%q is listed %d times; it has %d %s: list it once (its values together) or once per value", k, n, len(values), plural(len(values), "value"))
			}
		}
	}
}

func countOf(l []string, s string) int {
	n := 0
	for _, x := range l {
		if x == s {
			n++
		}
	}
	return n
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// DeleteExtraArg removes comp's extra arg name, every value, and its
// places in extraArgsOrder, dropping the maps it empties.
func (st *NodeState) DeleteExtraArg(comp, name string) {
	delete(st.ExtraArgs[comp], name)
	if len(st.ExtraArgs[comp]) == 0 {
		delete(st.ExtraArgs, comp)
	}
	if order := st.ExtraArgsOrder[comp]; order != nil {
		order = slices.DeleteFunc(slices.Clone(order), func(k string) bool { return k == name })
		if len(order) == 0 {
			delete(st.ExtraArgsOrder, comp)
		} else {
			st.ExtraArgsOrder[comp] = order
		}
	}
}
