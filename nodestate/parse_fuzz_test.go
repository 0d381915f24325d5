package nodestate

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics, and what it accepts is valid and survives
// Marshal and Parse again unchanged. Seeds: testdata/fuzz/FuzzParse and the
// repository's node state files.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../testdata/states/*.yaml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Parse(b)
		if err != nil {
			return
		}
		if err := st.Validate(); err != nil {
			t.Fatalf("Parse accepted a state that does not validate: %v", err)
		}
		out, err := st.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed state: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of Marshal's output: %v\n%s", err, out)
		}
		out2, err := again.Marshal()
		if err != nil || string(out2) != string(out) {
			t.Fatalf("Marshal/Parse round trip is not stable (%v):\n%s\n---\n%s", err, out, out2)
		}
	})
}
