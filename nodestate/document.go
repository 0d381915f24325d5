package nodestate

// The node state written for an operator to edit: YAML or JSON with the
// fields in the order the reference (docs/reference/node-state.md) and the
// Go type give them, not sorted by name as Marshal's.

import (
	"bytes"
	"encoding/json"
	"fmt"

	yamlv3 "go.yaml.in/yaml/v3"
)

// JSON encodes st as one line of JSON, fields in the reference's order.
func (st *NodeState) JSON() ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode node state: %w", err)
	}
	return append(b, '\n'), nil
}

// YAML encodes st as YAML, fields in the reference's order, each value
// quoted only where YAML needs it. Parse(YAML(st)) yields an equal state.
func (st *NodeState) YAML() ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode node state: %w", err)
	}
	// JSON is YAML: decoded as a node tree it keeps the fields' order.
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("encode node state: %w", err)
	}
	plainStyle(&doc)
	var buf bytes.Buffer
	enc := yamlv3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encode node state: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode node state: %w", err)
	}
	return buf.Bytes(), nil
}

// plainStyle drops the JSON styles (flow mappings, double quotes) from n
// and below; the encoder quotes a string that would read as another type.
func plainStyle(n *yamlv3.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}
