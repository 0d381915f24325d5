package nodestate

// Strict decoding of the YAML files an operator writes (node states,
// releases), with errors that give the line, the field and a suggestion.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// DecodeError is a problem of a YAML document at a line (1-based; 0 when
// unknown): a syntax error, an unknown field, a value of the wrong kind, a
// second document.
type DecodeError struct {
	Line int
	Msg  string
}

func (e *DecodeError) Error() string {
	if e.Line <= 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// KindError is a document of another kind than the one expected: a node
// state given where a release is wanted, or the other way round.
type KindError struct {
	Line      int
	Got, Want string
}

// kindNames are the kinds an operator writes, as the text calls them.
var kindNames = map[string]string{Kind: "a node state", "Release": "a release"}

func (e *KindError) Error() string {
	if what, ok := kindNames[e.Got]; ok {
		return fmt.Sprintf("line %d: kind: %s: this file is %s, not %s", e.Line, e.Got, what, kindNames[e.Want])
	}
	return fmt.Sprintf("line %d: kind: must be %s, got %q", e.Line, e.Want, e.Got)
}

// DecodeStrict decodes b, which must hold exactly one YAML document of the
// given kind (its kind field), into out, a pointer to a struct with json
// tags. An unknown field (with the closest known one as a suggestion), a
// value of the wrong kind (a list where a mapping belongs), a document of
// another kind (*KindError) and a second non-empty document are errors
// that give the line; so are YAML syntax errors. A missing kind is left to
// the caller's validation.
func DecodeStrict(b []byte, kind string, out any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("empty document")
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(b))
	var root *yamlv3.Node
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return &DecodeError{Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		if empty(&doc) {
			continue
		}
		if root != nil {
			return &DecodeError{Line: doc.Line, Msg: fmt.Sprintf("a second YAML document starts here; the file must hold one %s only (split it into files)", kind)}
		}
		root = doc.Content[0]
	}
	if root == nil {
		return errors.New("empty document")
	}
	if root.Kind != yamlv3.MappingNode {
		return &DecodeError{Line: root.Line, Msg: fmt.Sprintf("want the fields of a %s (apiVersion, kind, ...), got %s", kind, describeNode(root))}
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k, v := root.Content[i], root.Content[i+1]; k.Value == "kind" && v.Kind == yamlv3.ScalarNode && v.Value != "" && v.Value != kind {
			return &KindError{Line: v.Line, Got: v.Value, Want: kind}
		}
	}
	if err := walkNode(root, root.Line, reflect.TypeOf(out), ""); err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		return cleanYAMLError(err)
	}
	return nil
}

var argValuesType = reflect.TypeOf(ArgValues(nil))

// empty reports whether doc holds nothing (a "---" followed by nothing, or
// only comments).
func empty(doc *yamlv3.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return n.Kind == yamlv3.ScalarNode && n.Tag == "!!null" && n.Value == ""
}

// walkNode checks n against type t: every mapping key a field of the
// struct, every value of the kind its field takes. line is where n's
// field is (its key's line: a list or mapping value starts below it).
func walkNode(n *yamlv3.Node, line int, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yamlv3.AliasNode || (n.Kind == yamlv3.ScalarNode && n.Tag == "!!null") {
		return nil // aliases and nulls: left to the typed decode
	}
	if t == argValuesType {
		// An extra arg: one value, or the list of a flag given more
		// than once.
		switch n.Kind {
		case yamlv3.ScalarNode:
			return nil
		case yamlv3.SequenceNode:
			return walkNode(n, line, reflect.TypeOf([]string(nil)), path)
		}
		return &DecodeError{Line: line, Msg: fmt.Sprintf("%s: want a value or a list of values, got %s", path, describeNode(n))}
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		// A type that decodes itself (a resource.Quantity inside a
		// valueFrom): its own decoder says what it takes.
		return nil
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		if n.Kind != yamlv3.MappingNode {
			return &DecodeError{Line: line, Msg: fmt.Sprintf("%s: want a mapping (field: value lines), got %s", path, describeNode(n))}
		}
	case reflect.Slice:
		if n.Kind != yamlv3.SequenceNode {
			return &DecodeError{Line: line, Msg: fmt.Sprintf("%s: want a list, got %s", path, describeNode(n))}
		}
		for _, c := range n.Content {
			if err := walkNode(c, c.Line, t.Elem(), path+"[]"); err != nil {
				return err
			}
		}
		return nil
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint16, reflect.Uint32:
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!int" {
			return &DecodeError{Line: line, Msg: fmt.Sprintf("%s: want a whole number, got %s", path, describeNode(n))}
		}
		return nil
	case reflect.Bool:
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!bool" {
			return &DecodeError{Line: line, Msg: fmt.Sprintf("%s: want true or false, got %s", path, describeNode(n))}
		}
		return nil
	default:
		if n.Kind != yamlv3.ScalarNode {
			return &DecodeError{Line: line, Msg: fmt.Sprintf("%s: want a single value, got %s", path, describeNode(n))}
		}
		return nil
	}
	var fields map[string]reflect.Type
	var names []string
	if t.Kind() == reflect.Struct {
		fields = map[string]reflect.Type{}
		names = structFields(t, fields)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft := t
		if fields == nil {
			ft = t.Elem()
		} else if f, ok := fields[k.Value]; ok {
			ft = f
		} else {
			return &DecodeError{Line: k.Line, Msg: unknownField(join(path, k.Value), k.Value, names)}
		}
		if err := walkNode(v, k.Line, ft, join(path, k.Value)); err != nil {
			return err
		}
	}
	return nil
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// structFields adds t's YAML fields to fields and returns their names, in
// declaration order; the fields of an embedded struct without a name of
// its own (corev1's LocalObjectReference) are t's, as encoding/json has it.
func structFields(t reflect.Type, fields map[string]reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
			names = append(names, structFields(f.Type, fields)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
		names = append(names, name)
	}
	return names
}

// unknownField says that field (at path) is unknown, with the known field
// closest to it as a suggestion, or the known fields.
func unknownField(path, field string, known []string) string {
	msg := fmt.Sprintf("unknown field %q", path)
	if s := closest(field, known); s != "" {
		return msg + fmt.Sprintf(" (did you mean %q?)", s)
	}
	return msg + " (known here: " + strings.Join(known, ", ") + ")"
}

// closest is the name in known nearest to s, by edit distance ignoring
// case, when it is near enough to be a typo; "" otherwise.
func closest(s string, known []string) string {
	best, bestD := "", 0
	for _, k := range known {
		d := editDistance(strings.ToLower(s), strings.ToLower(k))
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(2, len(s)/4) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = slices.Min([]int{sub, prev[j] + 1, cur[j-1] + 1})
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// describeNode names what n is, for an error: "a list", "a mapping", or the
// value.
func describeNode(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.SequenceNode:
		return "a list"
	case yamlv3.MappingNode:
		return "a mapping"
	}
	return fmt.Sprintf("%q", n.Value)
}
