package cli

// The machine-readable output formats of --output: json, one object per
// line (docs/cli.md#json-output), and yaml, the same objects as YAML
// documents, each opened by "---" so that a stream of them (run's events)
// is a multi-document YAML stream. Every command writes its objects
// through write, so each has both.

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// outputFormats are --output's values, offered by completion.
var outputFormats = []string{"text", "json", "yaml"}

// json reports whether the output is machine-readable (json or yaml):
// every command then prints objects, not text.
func (g *globals) json() bool { return g.output == "json" || g.output == "yaml" }

// write writes v in the output format to stdout.
func (g *globals) write(v any) error { return writeAs(g.stdout, g.output, v) }

// writeAs writes v to w as one line of JSON or, for format yaml, as one
// YAML document: the JSON's fields, names and nulls, converted.
func writeAs(w io.Writer, format string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if format != "yaml" {
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "---\n%s", y)
	return err
}
