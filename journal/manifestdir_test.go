package journal

import (
	"errors"
	"path/filepath"
	"testing"
)

// The manifest directory is absent until recorded, survives a reopen,
// can be moved while no transaction is open, and is refused while one is
// or when it is not an absolute, clean path.
func TestManifestDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j := openTest(t, path, Options{BootID: (&bootIDs{id: "boot-A"}).BootID})
	if dir, err := j.ManifestDir(); err != nil || dir != "" {
		t.Fatalf("ManifestDir of a new journal = %q, %v; want \"\", nil", dir, err)
	}
	for _, bad := range []string{"", "rel/dir", "/a/../b", "/a/"} {
		if err := j.PutManifestDir(bad); err == nil {
			t.Errorf("PutManifestDir(%q) succeeded", bad)
		}
	}
	must(t, j.PutManifestDir("/etc/kubernetes/manifests"))
	must(t, j.Close())

	j = openTest(t, path, Options{ReadOnly: true})
	if dir, err := j.ManifestDir(); err != nil || dir != "/etc/kubernetes/manifests" {
		t.Fatalf("ManifestDir after reopen = %q, %v", dir, err)
	}
	if err := j.PutManifestDir("/srv/manifests"); err == nil {
		t.Error("PutManifestDir on a read-only journal succeeded")
	}
	must(t, j.Close())

	j = openTest(t, path, Options{BootID: (&bootIDs{id: "boot-A"}).BootID})
	must(t, j.PutManifestDir("/srv/manifests"))
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	if _, err := j.Begin(Txn{Kind: KindUpgrade}); err != nil {
		t.Fatal(err)
	}
	if err := j.PutManifestDir("/etc/kubernetes/manifests"); !errors.Is(err, ErrTxnOpen) {
		t.Errorf("PutManifestDir during an open txn = %v, want ErrTxnOpen", err)
	}
	if dir, _ := j.ManifestDir(); dir != "/srv/manifests" {
		t.Errorf("ManifestDir = %q after a refused move, want /srv/manifests", dir)
	}
}
