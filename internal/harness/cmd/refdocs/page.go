package main

// This file is a reference page's model: the document's fields from its Go
// type, the facts about each that the Go type does not carry (the table of
// the page's spec), and its example files; and its markdown.

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// A spec describes one reference page.
type spec struct {
	File   string       // the page, below docs/reference/: "node-state.md"
	Title  string       // its heading
	Pkg    string       // the Go package of Type, below the repository: "nodestate"
	Type   reflect.Type // the document's Go type
	Intro  string       // markdown: what the document is, who reads it, how
	Fields map[string]info
	// Minimal and Full are example files below docs/reference/examples/:
	// the required fields only, and every field. The tests decode and
	// validate both with the real decoder.
	Minimal, Full         string
	MinimalNote, FullNote string // markdown above each example
}

// info is what a page says about a field beyond its Go type and comment.
type info struct {
	Type     string // the type in operator terms; "" for the Go type's
	Required string // "yes", "no", or the condition that makes it required
	Default  string // markdown: what the code does when it is absent; "" only when Required is "yes"
	Values   string // markdown: the values and form accepted; "" for an object
}

// required reports whether the field is required unconditionally.
func (i info) required() bool { return i.Required == "yes" }

// conditional reports whether the field is required under a condition.
func (i info) conditional() bool { return i.Required != "yes" && i.Required != "no" }

// A built page: the spec, its fields and its examples, ready to render.
type page struct {
	spec
	fields         []field
	minimal, full  []byte
	fullDoc        map[string]any // the full example, decoded generically
	docsDir, exDir string
}

// load reads the spec's Go source and examples under root and checks that
// the spec covers exactly the type's fields, and the full example every
// field.
func load(root string, s spec) (*page, error) {
	docs, err := fieldDocs(filepath.Join(root, s.Pkg))
	if err != nil {
		return nil, err
	}
	fields, err := fieldsOf(s.Type, "", docs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.File, err)
	}
	p := &page{spec: s, fields: fields, docsDir: filepath.Join(root, "docs", "reference")}
	p.exDir = filepath.Join(p.docsDir, "examples")
	var problems []string
	seen := map[string]bool{}
	for _, f := range fields {
		seen[f.Path] = true
		in, ok := s.Fields[f.Path]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("field %s (%s) has no entry in the page's table", f.Path, f.GoName))
		case in.Required == "":
			problems = append(problems, fmt.Sprintf("field %s: say whether it is required", f.Path))
		case in.required() && in.Default != "":
			problems = append(problems, fmt.Sprintf("field %s: required, so it has no default", f.Path))
		case !in.required() && in.Default == "":
			problems = append(problems, fmt.Sprintf("field %s: optional, so say what happens when it is absent", f.Path))
		case !f.Object && in.Values == "":
			problems = append(problems, fmt.Sprintf("field %s: say which values it accepts", f.Path))
		}
	}
	for _, path := range slices.Sorted(maps.Keys(s.Fields)) {
		if !seen[path] {
			problems = append(problems, fmt.Sprintf("the page's table has an entry for %s, which %s has no field for", path, s.Type))
		}
	}
	if p.minimal, err = os.ReadFile(filepath.Join(p.exDir, s.Minimal)); err != nil {
		return nil, err
	}
	if p.full, err = os.ReadFile(filepath.Join(p.exDir, s.Full)); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(p.full, &p.fullDoc); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Full, err)
	}
	for _, f := range fields {
		if _, ok := lookup(p.fullDoc, f.Path); !ok {
			problems = append(problems, fmt.Sprintf("the full example %s does not set %s", s.Full, f.Path))
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s:\n  %s", s.File, strings.Join(problems, "\n  "))
	}
	return p, nil
}

// lookup is the value at a dotted path of a generically decoded document.
func lookup(doc map[string]any, path string) (any, bool) {
	var v any = doc
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// typeName is a Go type in YAML's terms.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Bool:
		return "boolean"
	case reflect.Struct, reflect.Pointer:
		return "object"
	case reflect.Map:
		return "map of " + typeName(t.Key()) + " to " + typeName(t.Elem())
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	}
	return t.String()
}

// example is the YAML of the full example's value at path, nested under
// its parents.
func (p *page) example(path string) (string, error) {
	v, _ := lookup(p.fullDoc, path)
	keys := strings.Split(path, ".")
	for i := len(keys) - 1; i >= 0; i-- {
		v = map[string]any{keys[i]: v}
	}
	b, err := yaml.Marshal(v)
	return string(b), err
}
