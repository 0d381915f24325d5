package main

// This file finds the fields of an input document: the YAML fields of its
// Go type (reflect), each with the doc comment of its Go field (go/ast on
// the package's source).

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// A field is one YAML field of a document, nested ones included.
type field struct {
	Path   string // dotted YAML path: "etcd.dataDir"
	GoName string // "EtcdMember.DataDir"
	Type   reflect.Type
	Doc    string // the Go field's doc comment, as text
	Object bool   // a struct (or pointer to one): its fields follow it
}

// yamlName is the field's name in YAML (its json tag), "" when it has none.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// fieldsOf walks t (a struct type) depth first, in declaration order: each
// field, then the fields of a struct-typed one. docs maps "Type.Field" to
// the field's doc comment.
func fieldsOf(t reflect.Type, prefix string, docs map[string]string) ([]field, error) {
	var out []field
	var missing []string
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name := yamlName(sf)
		if name == "" || !sf.IsExported() {
			continue
		}
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		f := field{
			Path:   join(prefix, name),
			GoName: t.Name() + "." + sf.Name,
			Type:   ft,
			Doc:    docs[t.Name()+"."+sf.Name],
			Object: ft.Kind() == reflect.Struct,
		}
		if f.Doc == "" {
			missing = append(missing, f.GoName)
		}
		out = append(out, f)
		if f.Object {
			sub, err := fieldsOf(ft, f.Path, docs)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no doc comment on %s: the reference is made of them; add one", strings.Join(missing, ", "))
	}
	return out, nil
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// fieldDocs reads the Go files of the package in dir (tests left out) and
// returns the doc comment of every field of every struct type declared
// there, keyed "Type.Field", as plain text with its lines joined.
func fieldDocs(dir string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fl := range st.Fields.List {
				for _, id := range fl.Names {
					docs[ts.Name.Name+"."+id.Name] = strings.Join(strings.Fields(fl.Doc.Text()), " ")
				}
			}
			return false
		})
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no struct type with fields (is this the package's source?)", dir)
	}
	return docs, nil
}

// operatorDoc is a field's doc comment as the reference shows it: the Go
// field name it starts with replaced by the field's YAML name.
func operatorDoc(f field) string {
	_, goField, _ := strings.Cut(f.GoName, ".")
	rest, ok := strings.CutPrefix(f.Doc, goField+" ")
	if !ok {
		return f.Doc
	}
	return "`" + f.Path + "` " + rest
}
