package lazyfs

import (
	"os"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// fsnotify watching a directory of the mount sees create, rename and
// remove done through the mount, as the kubelet watches its manifest dir.
func TestInotifySeesChanges(t *testing.T) {
	f := MountT(t)
	if err := os.Mkdir(f.Path("manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(f.Path("manifests")); err != nil {
		t.Fatal(err)
	}
	write(t, f, "manifests/a.yaml.tmp", []byte("a"), true)
	if err := os.Rename(f.Path("manifests/a.yaml.tmp"), f.Path("manifests/a.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.Path("manifests/a.yaml")); err != nil {
		t.Fatal(err)
	}
	want := []fsnotify.Event{
		{Name: f.Path("manifests/a.yaml.tmp"), Op: fsnotify.Create},
		{Name: f.Path("manifests/a.yaml.tmp"), Op: fsnotify.Rename},
		{Name: f.Path("manifests/a.yaml"), Op: fsnotify.Create},
		{Name: f.Path("manifests/a.yaml"), Op: fsnotify.Remove},
	}
	timeout := time.After(5 * time.Second)
	for len(want) > 0 {
		select {
		case ev := <-w.Events:
			if ev.Name == want[0].Name && ev.Has(want[0].Op) {
				want = want[1:]
			}
		case err := <-w.Errors:
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("no event for %v", want)
		}
	}
}
