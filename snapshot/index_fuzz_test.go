package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fuzzManifest is the one manifest file in the snapshot FuzzLoadIndex
// loads: a pod of kube-scheduler.
const fuzzManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
  labels:
    component: kube-scheduler
spec:
  containers:
  - name: kube-scheduler
    image: registry.k8s.io/kube-scheduler:v1.34.4
`

// FuzzLoadIndex: Load of a snapshot whose index.json holds arbitrary bytes
// (beside manifests/kube-scheduler.yaml and derived/admission.yaml) never
// panics; it loads or fails with an error wrapping ErrInvalid. Seeds:
// testdata/fuzz/FuzzLoadIndex and a valid index.
func FuzzLoadIndex(f *testing.F) {
	sum := sha256.Sum256([]byte(fuzzManifest))
	f.Add([]byte(fmt.Sprintf(`{"version":1,"created":"2026-12-02T13:04:05Z","manifestDir":"/etc/kubernetes/manifests","entries":[`+
		`{"kind":"manifest","name":"kube-scheduler.yaml","component":"kube-scheduler","mode":384,"size":%d,"sha256":"%s"},`+
		`{"kind":"derived","name":"admission.yaml","livePath":"/etc/kubernetes/stratum/admission.yaml","mode":384,"size":3,"sha256":"%s"}]}`,
		len(fuzzManifest), hex.EncodeToString(sum[:]), sha256Hex([]byte("a: ")))))
	f.Fuzz(func(t *testing.T, index []byte) {
		dir := t.TempDir()
		for name, b := range map[string][]byte{
			indexFile: index,
			filepath.Join(manifestsDir, "kube-scheduler.yaml"): []byte(fuzzManifest),
			filepath.Join(derivedDir, "admission.yaml"):        []byte("a: "),
		} {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		l, err := Load(dir, []string{"/etc/kubernetes/stratum/admission.yaml"})
		switch {
		case err != nil && !errors.Is(err, ErrInvalid):
			t.Fatalf("Load failed without ErrInvalid: %v", err)
		case err == nil && l == nil:
			t.Fatal("Load returned neither a snapshot nor an error")
		}
	})
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
