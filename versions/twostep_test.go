package versions

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// emu is a node with every Kubernetes component at binary v, each
// emulating minor e ("" for none).
func emu(v, e string) *resolve.Node {
	st := k("3.6.16", v)
	if e != "" {
		for _, c := range kubernetesComponents {
			st.SetExtraArg(c, FlagEmulatedVersion, "kube="+e)
		}
	}
	return resolve.Resolve(st)
}

func TestBinaryStepAndPending(t *testing.T) {
	got := BinaryStep(emu("v1.36.3", ""), emu("v1.37.2", ""))
	if len(got) != 3 || got[nodestate.KubeAPIServer] != "kube=1.36" || got[nodestate.Scheduler] != "kube=1.36" {
		t.Fatalf("BinaryStep 1.36 -> 1.37 = %v, want kube=1.36 on the three", got)
	}
	if got := BinaryStep(emu("v1.37.1", ""), emu("v1.37.2", "")); len(got) != 0 {
		t.Errorf("BinaryStep of a patch move = %v, want none", got)
	}
	// A node still emulating 1.35 on 1.36 binaries keeps 1.35 on 1.37:
	// the minor it ran at, not its binary's.
	if got := BinaryStep(emu("v1.36.3", "1.35"), emu("v1.37.2", "")); got[nodestate.KubeAPIServer] != "kube=1.35" {
		t.Errorf("BinaryStep from 1.36 emulating 1.35 = %v, want kube=1.35", got)
	}
	// An operator's flag in the target stands.
	if got := BinaryStep(emu("v1.36.3", ""), emu("v1.37.2", "1.37")); len(got) != 0 {
		t.Errorf("BinaryStep with the flag set = %v, want none", got)
	}
	if ts, ok := PendingTwoStep(emu("v1.37.2", "1.36")); !ok || ts != (TwoStep{Binary: "1.37", Emulated: "1.36"}) {
		t.Errorf("PendingTwoStep(1.37 emulating 1.36) = %+v %v", ts, ok)
	}
	for _, n := range []*resolve.Node{emu("v1.37.2", ""), emu("v1.37.2", "1.37")} {
		if ts, ok := PendingTwoStep(n); ok {
			t.Errorf("PendingTwoStep of a node at its own minor = %+v", ts)
		}
	}
}

// TestCheckBinaryRollback pins when a binary may not go back a minor:
// after a finishing step (emulating the older minor before, not after)
// committed since the node last ran the older minor, and only then.
func TestCheckBinaryRollback(t *testing.T) {
	at137, emu136, at136 := emu("v1.37.2", ""), emu("v1.37.2", "1.36"), emu("v1.36.3", "")
	binary := Ran{Txn: "b", From: at136, To: emu136}
	finish := Ran{Txn: "f", From: emu136, To: at137}
	unfinish := Ran{Txn: "r", From: at137, To: emu136}
	oneStep := Ran{Txn: "u", From: at136, To: at137}
	for _, tc := range []struct {
		name     string
		from, to *resolve.Node
		ran      []Ran
		refused  bool
	}{
		{"the binary step undone", emu136, at136, []Ran{binary}, false},
		{"after the finishing step", at137, at136, []Ran{finish, binary}, true},
		{"the finish rolled back, then the binaries", emu136, at136, []Ran{unfinish, finish, binary}, true},
		{"a finish before the node ran 1.36 again", emu136, at136, []Ran{binary, {Txn: "back", From: at137, To: at136}, finish}, false},
		{"an upgrade without --two-step stays KubernetesDowngrade's", at137, at136, []Ran{oneStep}, false},
		{"a finish without a binary minor going back", at137, emu("v1.37.1", ""), []Ran{finish, binary}, false},
		{"a transaction with no from state", at137, at136, []Ran{{Txn: "i", To: at137}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			got, err := CheckBinaryRollback(tc.from, tc.to, func() ([]Ran, error) { reads++; return tc.ran, nil })
			if err != nil {
				t.Fatal(err)
			}
			if wantReads := 1; tc.from.State.KubernetesVersion[:5] == tc.to.State.KubernetesVersion[:5] && reads != 0 || reads > wantReads {
				t.Errorf("the history was read %d time(s), want once for a binary going back a minor, never otherwise", reads)
			}
			if !tc.refused {
				if len(got) > 0 {
					t.Fatalf("refused: %v", got)
				}
				return
			}
			if c := checks(got); !slices.Equal(c, []string{"EmulationFinished!", "EmulationFinished!", "EmulationFinished!"}) {
				t.Fatalf("checks %v, want EmulationFinished of each component, not ignorable", c)
			}
			for _, want := range []string{"goes back to 1.36 after the two-step upgrade's finishing step (transaction f)", "KEP-4330", "rollback --last of the finishing step"} {
				if !strings.Contains(got[0].Message, want) {
					t.Errorf("message lacks %q:\n%s", want, got[0].Message)
				}
			}
		})
	}
}

// A history that fails is the check's error, read only for a binary going
// back a minor.
func TestCheckBinaryRollbackHistoryError(t *testing.T) {
	boom := errors.New("journal unreadable")
	failing := func() ([]Ran, error) { return nil, boom }
	if _, err := CheckBinaryRollback(emu("v1.37.2", ""), emu("v1.36.3", ""), failing); !errors.Is(err, boom) {
		t.Errorf("a move back a minor with an unreadable history: %v, want its error", err)
	}
	if f, err := CheckBinaryRollback(emu("v1.36.3", ""), emu("v1.37.2", ""), failing); err != nil || f != nil {
		t.Errorf("an upgrade read the history: %v %v", f, err)
	}
}
