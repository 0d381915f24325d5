package proc

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// portEnv gives a health helper the port to share ("" or "0": any).
const portEnv = "STRATUM_PROC_TEST_PORT"

// serveHealth is the helper of modes "health200" and "health500": a
// component's TLS health endpoint on 127.0.0.1, its listener opened with
// SO_REUSEPORT as kube-apiserver's --permit-port-sharing does, answering
// /healthz with the mode's status. It prints "ready <port>".
func serveHealth(mode string) {
	code, _ := strconv.Atoi(strings.TrimPrefix(mode, "health"))
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	port := os.Getenv(portEnv)
	if port == "" {
		port = "0"
	}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	cert, err := selfSigned()
	if err != nil {
		fmt.Fprintln(os.Stderr, "certificate:", err)
		os.Exit(2)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(code)
			fmt.Fprintf(w, "pid %d says %d", os.Getpid(), code)
		}),
		ErrorLog: nil,
	}
	fmt.Printf("ready %d\n", ln.Addr().(*net.TCPAddr).Port)
	go func() {
		time.Sleep(helperLife)
		os.Exit(0)
	}()
	_ = srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	os.Exit(0)
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// startHealth runs a health helper under argv0 answering status on port
// (0: any) and returns it and its port once it listens.
func startHealth(t testing.TB, argv0 string, status, port int) (*exec.Cmd, int) {
	t.Helper()
	cmd := &exec.Cmd{
		Path:        helperPath,
		Args:        []string{argv0},
		Env:         append(os.Environ(), helperEnv+"=health"+itoa(status), portEnv+"="+itoa(port)),
		Stderr:      os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start health helper: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	got, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	p, perr := strconv.Atoi(got)
	if err != nil || !ok || perr != nil {
		t.Fatalf("health helper did not get ready: %q, %v", line, err)
	}
	return cmd, p
}

// twoInstances starts a healthy and an unhealthy instance of one
// component sharing a port, as a surge runs them.
func twoInstances(t testing.TB, name string) (healthy, sick *exec.Cmd, url string) {
	t.Helper()
	healthy, port := startHealth(t, name, 200, 0)
	sick, _ = startHealth(t, name, 500, port)
	return healthy, sick, fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
}

// TestAnsweredBy: of two instances on one port, an answer is the asked
// pids' exactly when they accepted the connection: the one answering 500
// is never taken for the healthy one, nor the other way round, and both
// are reached within a few attempts.
func TestAnsweredBy(t *testing.T) {
	healthy, sick, url := twoInstances(t, uniqueName(t, "apiserver"))
	s := self()
	for _, tc := range []struct {
		name string
		pid  int
		want int // the status its answers must have
	}{{"healthy", healthy.Process.Pid, 200}, {"sick", sick.Process.Pid, 500}} {
		mine, other := 0, 0
		for i := 0; i < 64 && (mine < 3 || other < 3); i++ {
			ours, err := s.answeredBy(context.Background(), url, []int{tc.pid})
			var se *statusError
			switch {
			case ours && tc.want == 200 && err == nil, ours && tc.want == 500 && errors.As(err, &se) && strings.Contains(se.status, "500"):
				mine++
			case !ours && errors.Is(err, errOtherInstance):
				other++
			default:
				t.Fatalf("asking as the %s instance (pid %d): ours %v, %v; want ours with HTTP %d, or another instance", tc.name, tc.pid, ours, err, tc.want)
			}
		}
		if mine < 3 || other < 3 {
			t.Errorf("%s instance: %d answers of its own and %d of the other in 64 attempts; SO_REUSEPORT should spread them", tc.name, mine, other)
		}
	}
}

// TestAnsweredByTCP6: a dual-stack listener holds a connection to
// 127.0.0.1 as a v4-mapped socket in net/tcp6; it is found there.
func TestAnsweredByTCP6(t *testing.T) {
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no dual-stack listener here: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go srv.Serve(ln)
	defer srv.Close()
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", ln.Addr().(*net.TCPAddr).Port)
	if ours, err := self().answeredBy(context.Background(), url, []int{os.Getpid()}); !ours || err != nil {
		t.Fatalf("answeredBy this process's dual-stack listener = %v, %v; want ours", ours, err)
	}
}

func TestProcAddr(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the expected strings are a little-endian host's")
	}
	for _, tc := range []struct {
		in   string
		six  bool
		want string
	}{
		{"127.0.0.1:6443", false, "0100007F:192B"},
		{"127.0.0.1:6443", true, "0000000000000000FFFF00000100007F:192B"},
		{"[::1]:10259", true, "00000000000000000000000001000000:2813"},
	} {
		a, err := netip.ParseAddrPort(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := procAddr(a, tc.six); got != tc.want {
			t.Errorf("procAddr(%s, six %v) = %s, want %s (as /proc/net/tcp writes it)", tc.in, tc.six, got, tc.want)
		}
	}
}

// TestServerSocketLookups: for a connection to a listener of this
// process, sock_diag and the net/tcp table name the same server socket,
// and this process holds it.
func TestServerSocketLookups(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	server, client := netip.MustParseAddrPort(c.RemoteAddr().String()), netip.MustParseAddrPort(c.LocalAddr().String())
	s := self()
	fromTable, found, err := s.tableInode(os.Getpid(), server, client)
	if err != nil || !found || fromTable == 0 {
		t.Fatalf("tableInode = %d, %v, %v", fromTable, found, err)
	}
	fromDiag, found, err := diagInode(server, client)
	if err != nil || !found || fromDiag != fromTable {
		t.Fatalf("diagInode = %d, %v, %v; want %d as the table says", fromDiag, found, err, fromTable)
	}
	// The client's side is another socket; a port nobody uses is none.
	if in, _, _ := diagInode(client, server); in == fromTable {
		t.Fatal("diagInode(client side) gave the server socket")
	}
	if _, found, err := diagInode(server, netip.AddrPortFrom(client.Addr(), 1)); err != nil || found {
		t.Fatalf("diagInode(no such connection) = found %v, %v; want not found (not the listener)", found, err)
	}
	if held, err := s.holdsConn([]int{os.Getpid()}, server, client); err != nil || !held {
		t.Fatalf("holdsConn(this process) = %v, %v", held, err)
	}
}

// TestHoldsConnFakeTable: outside this process's network namespace (here:
// a fake root) the socket is found in net/tcp6 and the pid's fds.
func TestHoldsConnFakeTable(t *testing.T) {
	const (
		header = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
		lines  = "   0: 00000000000000000000000000000000:192B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0\n" +
			"   1: 0000000000000000FFFF00000100007F:192B 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 20 4 0 10 -1\n"
	)
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the table is a little-endian host's")
	}
	root := fakeRoot(t, map[string]string{
		"600/net/tcp":  "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n",
		"600/net/tcp6": header + lines,
	})
	for _, d := range []string{"600/fd", "601/fd"} {
		if err := os.MkdirAll(root+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for pid, target := range map[string]string{"600/fd/3": "socket:[111]", "601/fd/7": "socket:[4242]", "601/fd/0": "/dev/null"} {
		if err := os.Symlink(target, root+"/"+pid); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	server, client := netip.MustParseAddrPort("127.0.0.1:6443"), netip.MustParseAddrPort("127.0.0.1:54321")
	if held, err := s.holdsConn([]int{600, 601}, server, client); err != nil || !held {
		t.Fatalf("holdsConn(600, 601) = %v, %v; want 601's fd 7 to hold socket 4242", held, err)
	}
	if held, err := s.holdsConn([]int{600}, server, client); err != nil || held {
		t.Fatalf("holdsConn(600) = %v, %v; want not held (600 holds only the listener)", held, err)
	}
	if _, err := s.holdsConn([]int{600}, server, netip.MustParseAddrPort("127.0.0.1:1")); !errors.Is(err, errUnattributed) {
		t.Fatalf("holdsConn(unknown connection) = %v; want errUnattributed", err)
	}
}
