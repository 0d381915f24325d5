package diff

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want string
	}{
		{name: "equal", a: "x\ny\n", b: "x\ny\n", want: ""},
		{name: "both empty", a: "", b: "", want: ""},
		{
			name: "new file",
			a:    "", b: "a\nb\n",
			want: "--- A\n+++ B\n@@ -0,0 +1,2 @@\n+a\n+b\n",
		},
		{
			name: "file removed",
			a:    "a\n", b: "",
			want: "--- A\n+++ B\n@@ -1 +0,0 @@\n-a\n",
		},
		{
			name: "one line changed in the middle",
			a:    "1\n2\n3\n4\n5\n6\n7\n8\n9\n", b: "1\n2\n3\n4\nX\n6\n7\n8\n9\n",
			want: "--- A\n+++ B\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+X\n 6\n 7\n 8\n",
		},
		{
			name: "two changes 6 apart share a hunk",
			a:    "1\n2\n3\n4\n5\n6\n7\n8\n", b: "X\n2\n3\n4\n5\n6\n7\nY\n",
			want: "--- A\n+++ B\n@@ -1,8 +1,8 @@\n-1\n+X\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+Y\n",
		},
		{
			name: "two changes 7 apart get two hunks",
			a:    "1\n2\n3\n4\n5\n6\n7\n8\n9\n", b: "X\n2\n3\n4\n5\n6\n7\n8\nY\n",
			want: "--- A\n+++ B\n@@ -1,4 +1,4 @@\n-1\n+X\n 2\n 3\n 4\n@@ -6,4 +6,4 @@\n 6\n 7\n 8\n-9\n+Y\n",
		},
		{
			name: "no newline at end",
			a:    "a\nb", b: "a\nb\n",
			want: "--- A\n+++ B\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n",
		},
		{
			name: "insertion after the first line",
			a:    "a\nc\n", b: "a\nb\nc\n",
			want: "--- A\n+++ B\n@@ -1,2 +1,3 @@\n a\n+b\n c\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Unified("A", "B", []byte(tc.a), []byte(tc.b), 3)
			if got != tc.want {
				t.Errorf("Unified:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// lcs is the length of a longest common subsequence, by dynamic programming.
func lcs(a, b []string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			switch {
			case a[i-1] == b[j-1]:
				cur[j] = prev[j-1] + 1
			case prev[j] > cur[j-1]:
				cur[j] = prev[j]
			default:
				cur[j] = cur[j-1]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func randomText(r *rand.Rand) []byte {
	var sb strings.Builder
	n := r.IntN(25)
	for i := 0; i < n; i++ {
		sb.WriteString(string(rune('a' + r.IntN(4))))
		if i < n-1 || r.IntN(5) != 0 {
			sb.WriteByte('\n')
		}
	}
	return []byte(sb.String())
}

// TestEditsProperties checks on random inputs that the edit script is a
// correct and shortest one: it rebuilds both inputs, and its number of
// changes is len(a)+len(b)-2*LCS.
func TestEditsProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 3000; iter++ {
		a, b := Lines(randomText(r)), Lines(randomText(r))
		es := Edits(a, b)
		var ra, rb []string
		changes := 0
		for _, e := range es {
			switch e.Op {
			case Equal:
				if a[e.A] != b[e.B] {
					t.Fatalf("equal edit of different lines %q %q", a[e.A], b[e.B])
				}
				ra, rb = append(ra, a[e.A]), append(rb, b[e.B])
			case Delete:
				ra = append(ra, a[e.A])
				changes++
			case Insert:
				rb = append(rb, b[e.B])
				changes++
			}
		}
		if strings.Join(ra, "") != strings.Join(a, "") || strings.Join(rb, "") != strings.Join(b, "") {
			t.Fatalf("edits do not rebuild the inputs\na=%q\nb=%q\nedits=%v", a, b, es)
		}
		if want := len(a) + len(b) - 2*lcs(a, b); changes != want {
			t.Fatalf("%d changes, shortest is %d\na=%q\nb=%q", changes, want, a, b)
		}
	}
}

// TestPatchApplies feeds Unified's output to the real patch(1): applied to
// a it must give b exactly, which checks hunk headers, context and the
// no-newline marker against a real consumer of the format.
func TestPatchApplies(t *testing.T) {
	patch, err := exec.LookPath("patch")
	if err != nil {
		t.Skip("patch(1) not installed")
	}
	r := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	for iter := 0; iter < 200; iter++ {
		a, b := randomText(r), randomText(r)
		d := Unified("a", "b", a, b, r.IntN(4))
		if d == "" {
			if !bytes.Equal(a, b) {
				t.Fatalf("empty diff of different inputs %q %q", a, b)
			}
			continue
		}
		in := filepath.Join(dir, "in")
		out := filepath.Join(dir, "out")
		if err := os.WriteFile(in, a, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Remove(out)
		cmd := exec.Command(patch, "-s", "-f", "-o", out, in)
		cmd.Stdin = strings.NewReader(d)
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("patch: %v: %s\na=%q\nb=%q\ndiff:\n%s", err, msg, a, b, d)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("patched a is %q, want %q\ndiff:\n%s", got, b, d)
		}
	}
}

func BenchmarkUnifiedManifest(b *testing.B) {
	var sa, sb strings.Builder
	for i := 0; i < 150; i++ {
		line := "    - --flag-" + strings.Repeat("x", i%7) + "=value\n"
		sa.WriteString(line)
		if i == 40 || i == 90 {
			line = "    image: registry.k8s.io/kube-scheduler:v1.34.5\n"
		}
		sb.WriteString(line)
	}
	x, y := []byte(sa.String()), []byte(sb.String())
	for b.Loop() {
		Unified("a", "b", x, y, 3)
	}
}
