package cri

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/cri-client/pkg/fake"
)

// fakeRuntime starts k8s.io/cri-client's fake CRI server (the real gRPC
// service over a unix socket, images kept in memory) holding images, each
// of size bytes. The tests use it for what a real runtime cannot be made
// to do here without root: hold a chosen set of images, fail a pull on
// cue. The e2e (e2e/registry_test.go) runs the same client against real
// containerd and a real registry.
func fakeRuntime(t *testing.T, size uint64, images ...string) (*fake.RemoteRuntime, Source) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	f := fake.NewFakeRemoteRuntime()
	f.ImageService.SetFakeImageSize(size)
	f.ImageService.SetFakeImages(images)
	if err := f.Start("unix://" + sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f, Source{Endpoint: "unix://" + sock, From: "test"}
}

func TestStatusAndPull(t *testing.T) {
	ctx := context.Background()
	f, src := fakeRuntime(t, 4096, "registry.k8s.io/etcd:3.6.16-0")
	c, err := Dial(src, DialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	img, err := c.Status(ctx, "registry.k8s.io/etcd:3.6.16-0")
	if err != nil || !img.Present || img.Size != 4096 {
		t.Fatalf("status of a present image = %+v, %v; want present, 4096 bytes", img, err)
	}
	img, err = c.Status(ctx, "registry.k8s.io/kube-apiserver:v1.34.5")
	if err != nil || img.Present {
		t.Fatalf("status of a missing image = %+v, %v; want not present, no error", img, err)
	}
	img, err = c.Pull(ctx, "registry.k8s.io/kube-apiserver:v1.34.5")
	if err != nil || !img.Present || img.Size != 4096 {
		t.Fatalf("pull = %+v, %v; want present, 4096 bytes", img, err)
	}
	if !slices.Contains(f.ImageService.Called, "PullImage") {
		t.Fatalf("the runtime was not asked to pull: calls %v", f.ImageService.Called)
	}
}

func TestPullFailureNamesImageAndReason(t *testing.T) {
	f, src := fakeRuntime(t, 1)
	why := `failed to resolve reference "127.0.0.1:5000/kube-apiserver:v9.9.9": not found`
	f.ImageService.InjectError("PullImage", status.Error(codes.NotFound, why))
	c, err := Dial(src, DialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Pull(context.Background(), "127.0.0.1:5000/kube-apiserver:v9.9.9")
	var pe *PullError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPull) {
		t.Fatalf("pull error = %v (%T), want *PullError", err, err)
	}
	if pe.Reason != why || !strings.Contains(err.Error(), "127.0.0.1:5000/kube-apiserver:v9.9.9") || !strings.Contains(err.Error(), src.Endpoint) {
		t.Fatalf("pull error %q: want the image, the endpoint and the runtime's reason %q unwrapped", err, why)
	}
}

func TestDialNoRuntime(t *testing.T) {
	dir := t.TempDir()
	// No socket at all: refused at once, without a dial.
	start := time.Now()
	_, err := Dial(Source{Endpoint: "unix://" + filepath.Join(dir, "none.sock"), From: "test"}, DialTimeout)
	if !errors.Is(err, ErrNoRuntime) || time.Since(start) > time.Second {
		t.Fatalf("dial of a missing socket = %v after %s; want ErrNoRuntime at once", err, time.Since(start))
	}
	// A socket that accepts but does not speak CRI: refused within the
	// timeout, naming the endpoint.
	sock := filepath.Join(dir, "mute.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start = time.Now()
	_, err = Dial(Source{Endpoint: "unix://" + sock, From: "test"}, time.Second)
	if !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("dial of a mute socket = %v; want ErrNoRuntime naming %s", err, sock)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("dial of a mute socket took %s, want about the 1s timeout", d)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := write("config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/k3s/containerd.sock\n")
	// The flag wins over kubelet's configuration; a bare path is a unix socket.
	if s, err := Resolve("/run/x.sock", nil, cfg); err != nil || s.Endpoint != "unix:///run/x.sock" || s.From != "--cri-socket" {
		t.Fatalf("explicit: %+v, %v", s, err)
	}
	if s, err := Resolve("", nil, cfg); err != nil || s.Endpoint != "unix:///run/k3s/containerd.sock" || !strings.Contains(s.From, cfg) {
		t.Fatalf("kubelet config: %+v, %v", s, err)
	}
	if _, err := Resolve("", nil, write("bad.yaml", "kind: Pod\n")); err == nil || !strings.Contains(err.Error(), "not KubeletConfiguration") {
		t.Fatalf("a file of another kind: %v, want refused", err)
	}
	if _, err := Resolve("", nil, write("broken.yaml", "kind: [\n")); err == nil {
		t.Fatal("an unparsable kubelet configuration was accepted")
	}
	// No endpoint in the config: the defaults, the first whose socket exists.
	saved := DefaultEndpoints
	defer func() { DefaultEndpoints = saved }()
	crio := filepath.Join(dir, "crio.sock")
	DefaultEndpoints = []Source{{Endpoint: "unix://" + filepath.Join(dir, "containerd.sock"), From: "containerd's default socket"}, {Endpoint: "unix://" + crio, From: "CRI-O's default socket"}}
	noEP := write("noep.yaml", "kind: KubeletConfiguration\n")
	if _, err := Resolve("", nil, noEP); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "containerd.sock") {
		t.Fatalf("no socket: %v, want ErrNoRuntime naming what was tried", err)
	}
	write("crio.sock", "")
	if s, err := Resolve("", nil, filepath.Join(dir, "absent.yaml")); err != nil || s.Endpoint != "unix://"+crio {
		t.Fatalf("defaults: %+v, %v; want CRI-O's socket, the only one there", s, err)
	}
}
