package etcdbuild

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBinaryBuildsOnceAndRuns(t *testing.T) {
	for _, b := range Builds {
		t.Run(b.Minor, func(t *testing.T) {
			path, err := Binary(b.Minor)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(path, "--version").Output()
			if err != nil {
				t.Fatal(err)
			}
			if want := "etcd Version: " + strings.TrimPrefix(b.ModuleVersion, "v"); !strings.Contains(string(out), want) {
				t.Fatalf("%s --version: %q, want %q", path, out, want)
			}
			// A second call is served from the cache: same file, not rebuilt.
			again, err := Binary(b.Image)
			if err != nil {
				t.Fatal(err)
			}
			fi2, err := os.Stat(again)
			if err != nil {
				t.Fatal(err)
			}
			if again != path || !fi2.ModTime().Equal(fi.ModTime()) {
				t.Fatalf("second Binary call rebuilt or moved the binary: %s -> %s", path, again)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for v, minor := range map[string]string{
		"3.5": "3.5", "v3.5.35": "3.5", "3.5.35": "3.5", "registry.k8s.io/etcd:3.5.35-0": "3.5",
		"3.7": "3.7", "v3.7.3": "3.7", "registry.k8s.io/etcd:3.7.3-0": "3.7",
	} {
		if b, err := Lookup(v); err != nil || b.Minor != minor {
			t.Errorf("Lookup(%q) = %+v, %v, want %s", v, b, err, minor)
		}
	}
	for _, v := range []string{"3.5.21", "registry.k8s.io/etcd:3.5.21-0"} {
		if _, err := Lookup(v); err == nil {
			t.Errorf("Lookup(%s) found a build: only the builds' own versions and images name one", v)
		}
	}
	if _, err := Lookup("3.4"); err == nil || !strings.Contains(err.Error(), "known") {
		t.Errorf("Lookup(3.4) = %v, want an error listing the known builds", err)
	}
}

// TestStartsWithPlainFlags starts each build as a one-member cluster with
// only flags every minor accepts (3.7 rejects the experimental- names 3.5
// and 3.6 take) and waits for its /health.
func TestStartsWithPlainFlags(t *testing.T) {
	for _, b := range Builds {
		t.Run(b.Minor, func(t *testing.T) {
			path, err := Binary(b.Minor)
			if err != nil {
				t.Fatal(err)
			}
			ports := freePorts(t, 2)
			client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
			peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
			logPath := filepath.Join(t.TempDir(), "etcd.log")
			logFile, err := os.Create(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer logFile.Close()
			log := func() string { b, _ := os.ReadFile(logPath); return string(b) }
			cmd := exec.Command(path, "--name=plain", "--data-dir="+t.TempDir(),
				"--listen-client-urls="+client, "--advertise-client-urls="+client,
				"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
				"--initial-cluster=plain="+peer, "--initial-cluster-state=new")
			cmd.Stdout, cmd.Stderr = logFile, logFile
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				_ = cmd.Process.Kill()
				<-exited
			}()
			deadline := time.Now().Add(30 * time.Second)
			for {
				select {
				case err := <-exited:
					exited <- err
					t.Fatalf("etcd %s exited: %v\n%s", b.ModuleVersion, err, log())
				default:
				}
				if resp, err := http.Get(client + "/health"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						return
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("etcd %s: no healthy /health in 30s\n%s", b.ModuleVersion, log())
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// freePorts is n distinct ports free on 127.0.0.1 when returned.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
