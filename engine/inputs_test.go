package engine

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// sameRelease is the release the node already runs: its version and
// every image as the state has them.
func sameRelease(st *nodestate.NodeState) *Release {
	return &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: st.KubernetesVersion, Images: maps.Clone(st.Images)}
}

// identities is every roster component's processes (pid, start ticks).
func identities(t *testing.T, n *testbed.Node) map[string][]proc.Process {
	t.Helper()
	out := map[string][]proc.Process{}
	for _, comp := range manifest.NamesFor(n.State) {
		tg, err := manifest.Target(n.State, comp)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := n.Scanner.PIDs(tg.Binary)
		if err != nil || len(ps) == 0 {
			t.Fatalf("%s: processes %v, %v", comp, ps, err)
		}
		out[comp] = ps
	}
	return out
}

// rotateServiceAccountKey writes a new service-account key pair (sa.key,
// sa.pub) into the node's PKI directory, as a rotation would.
func rotateServiceAccountKey(t *testing.T, st *nodestate.NodeState) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"sa.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		"sa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	} {
		if err := os.WriteFile(filepath.Join(st.PKIDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRotatedInputRestartsItsReaders rotates the service-account key pair
// on a running node; a run of the release the node already runs then
// replaces exactly the components that read those files only at start
// (kube-apiserver and kube-controller-manager), one at a time with the
// waits, and every other component keeps its processes (pid and start
// ticks). Before the rotation the same release is nothing to do.
func TestRotatedInputRestartsItsReaders(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	rel := sameRelease(f.node.State)
	if _, err := f.e.Run(t.Context(), rel, nil); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("same release before the rotation: %v", err)
	}
	before := identities(t, f.node)
	rotateServiceAccountKey(t, f.node.State)

	plan, err := PlanUpgrade(t.Context(), f.node.Store, f.node.Scanner, f.node.State, rel, UpgradeOptions{})
	if err != nil {
		t.Fatalf("plan after the rotation: %v", err)
	}
	want := []string{nodestate.KubeAPIServer, nodestate.ControllerManager}
	if got := plan.InputsChanged(); !slices.Equal(got, want) {
		t.Fatalf("plan: inputs changed %v, want %v", got, want)
	}
	if got := plan.Changed(); !slices.Equal(got, want) {
		t.Fatalf("plan: changes %v, want %v", got, want)
	}
	if rel, edited := plan.Released(), plan.EditedByHand(); len(rel) != 0 || len(edited) != 0 {
		t.Fatalf("plan: released %v, edited by hand %v, want none", rel, edited)
	}

	res, err := f.e.Run(t.Context(), rel, nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("run after the rotation: %+v %v", res, err)
	}
	if !slices.Equal(res.Changed, want) {
		t.Fatalf("run changed %v, want %v", res.Changed, want)
	}
	f.checkConverged(Committed, nil)
	after := identities(t, f.node)
	for _, comp := range manifest.NamesFor(f.node.State) {
		same := slices.Equal(before[comp], after[comp])
		if slices.Contains(want, comp) == same {
			t.Errorf("%s: processes %v before, %v after; replaced: %v, want %v", comp, before[comp], after[comp], !same, slices.Contains(want, comp))
		}
	}
	// Nothing changed since: the same release is nothing to do again.
	if _, err := f.e.Run(t.Context(), rel, nil); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("same release after the run: %v", err)
	}
}
