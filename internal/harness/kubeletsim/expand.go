package kubeletsim

import "strings"

// Expand expands $(VAR) references in s the way kubelet expands a
// container's command, args and env values (k8s.io/kubernetes
// third_party/forked/golang/expansion): $(NAME) becomes lookup(NAME) when
// lookup knows NAME and stays literally "$(NAME)" when it does not; "$$"
// becomes "$"; a "$" before anything else, and an unterminated "$(", are
// kept as they are.
func Expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(s); cursor++ {
		if s[cursor] != '$' || cursor+1 >= len(s) {
			continue
		}
		b.WriteString(s[checkpoint:cursor])
		read, isVar, advance := readVariable(s[cursor+1:])
		if isVar {
			if v, ok := lookup(read); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + read + ")")
			}
		} else {
			b.WriteString(read)
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	return b.String() + s[checkpoint:]
}

// readVariable reads what follows a '$': the bytes to emit (or the variable
// name when isVar) and how many bytes of s it consumed.
func readVariable(s string) (read string, isVar bool, advance int) {
	switch s[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(s); i++ {
			if s[i] == ')' {
				return s[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	default:
		return "$" + s[0:1], false, 1
	}
}
