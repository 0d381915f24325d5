// Package standin is a stand-in for the control-plane components a node runs
// as static pods: one program that, installed or exec'd under a component's
// name (kube-apiserver, kube-controller-manager, kube-scheduler, kube-vip),
// accepts the flags the renderer emits and serves the component's health
// endpoints on the component's port, so that tests exercise the real wait
// and health-check paths without the real components.
//
// The component is the basename of argv[0], or the STANDIN_COMPONENT
// environment variable when set. Its behaviour is chosen by STANDIN_MODE (see
// the Mode constants); the kubelet stand-in sets it from the image map, which
// models an image's ENV layer, so an image tag selects a behaviour.
//
// kube-apiserver and kube-scheduler serve /livez, /readyz and /healthz
// (kubeadm probes the scheduler's /livez and /readyz since its server
// installs them, cmd/kube-scheduler/app/server.go); kube-controller-manager
// serves /healthz; all over HTTPS with a self-signed
// certificate generated in memory at start, on 127.0.0.1 (or the loopback
// address --bind-address names) and --secure-port (default: the upstream
// port). --permit-port-sharing sets SO_REUSEPORT on the listener, as the
// real components do, so two instances share a port only when both carry
// it. kube-vip has no listener and runs until SIGTERM. Every other flag is
// accepted and ignored.
package standin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Environment variables the stand-in reads. The kubelet stand-in passes a
// container only its pod env and its image-map env, so these are set in the
// image map.
const (
	// EnvComponent overrides the component taken from argv[0].
	EnvComponent = "STANDIN_COMPONENT"
	// EnvMode selects the behaviour; empty means ModeHealthy.
	EnvMode = "STANDIN_MODE"
	// EnvCrashAfter is how long ModeCrashAfter runs before exiting 1, as a
	// Go duration ("2s"); default 2s.
	EnvCrashAfter = "STANDIN_CRASH_AFTER"
	// EnvReadyAfter delays the first healthy answer: until then the health
	// endpoints answer 500. A Go duration; default 0.
	EnvReadyAfter = "STANDIN_READY_AFTER"
	// EnvEvents names a file the stand-in appends its Events to, one JSON
	// object a line. Unset means no events are recorded.
	EnvEvents = "STANDIN_EVENTS"
)

// Mode is a stand-in behaviour.
type Mode string

// The behaviours.
const (
	// ModeHealthy listens and answers 200 "ok"; exits 0 on SIGTERM.
	ModeHealthy Mode = "healthy"
	// ModeExitAtStart exits 1 at once, before listening.
	ModeExitAtStart Mode = "exit-at-start"
	// ModeNeverListen runs until SIGTERM without ever listening.
	ModeNeverListen Mode = "never-listen"
	// ModeUnhealthy listens and answers 500 on every health endpoint.
	ModeUnhealthy Mode = "unhealthy"
	// ModeCrashAfter behaves as ModeHealthy, then exits 1 after
	// STANDIN_CRASH_AFTER.
	ModeCrashAfter Mode = "crash-after"
	// ModeIgnoreSIGTERM behaves as ModeHealthy but ignores SIGTERM, so
	// only SIGKILL stops it (a container PID 1 without a handler).
	ModeIgnoreSIGTERM Mode = "ignore-sigterm"
)

// Modes is every Mode, for validation and documentation.
var Modes = []Mode{ModeHealthy, ModeExitAtStart, ModeNeverListen, ModeUnhealthy, ModeCrashAfter, ModeIgnoreSIGTERM}

// Component is what the stand-in knows of one component.
type Component struct {
	// DefaultPort is the upstream --secure-port default; 0 means no listener.
	DefaultPort int
	// Paths are the health endpoints served.
	Paths []string
}

// Components maps each component name the stand-in can stand in for to its
// listener. kube-vip has none (its metrics server is disabled in the render).
var Components = map[string]Component{
	"kube-apiserver":          {DefaultPort: 6443, Paths: []string{"/livez", "/readyz", "/healthz"}},
	"kube-controller-manager": {DefaultPort: 10257, Paths: []string{"/healthz"}},
	"kube-scheduler":          {DefaultPort: 10259, Paths: []string{"/livez", "/readyz", "/healthz"}},
	"kube-vip":                {},
}

// Event kinds recorded in the STANDIN_EVENTS file.
const (
	EventStart   = "start"   // the process started and parsed its flags
	EventListen  = "listen"  // the listener is open
	EventHealthy = "healthy" // the first 200 was written to a health request
	EventExit    = "exit"    // the process is about to exit on its own terms
)

// Event is one line of the STANDIN_EVENTS file.
type Event struct {
	Time      time.Time `json:"time"`
	Event     string    `json:"event"`
	Component string    `json:"component"`
	PID       int       `json:"pid"`
	Mode      Mode      `json:"mode"`
	Addr      string    `json:"addr,omitempty"`
	Detail    string    `json:"detail,omitempty"`
}

// ReadEvents reads every Event in path, in the order they were appended. A
// missing file is no events. A line that does not decode is an error naming
// the file and the line.
func ReadEvents(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stand-in events %s: %w", path, err)
	}
	var out []Event
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("stand-in events %s line %d: %w", path, i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Options is a parsed stand-in invocation.
type Options struct {
	Component  string
	Mode       Mode
	Addr       string // host:port to listen on; empty for no listener
	CrashAfter time.Duration
	ReadyAfter time.Duration
	EventsFile string
	// PermitPortSharing and PermitAddressSharing are the components'
	// --permit-port-sharing and --permit-address-sharing (pflag bools):
	// SO_REUSEPORT and SO_REUSEADDR on the listener.
	PermitPortSharing    bool
	PermitAddressSharing bool
	Unknown              []string // flags accepted and ignored, for the log
	componentOK          Component
}

// Parse derives Options from argv and the environment lookup getenv. It
// fails for an unknown component or mode, an unparsable --secure-port or
// duration, and a --bind-address that is not a loopback address (the
// stand-in never listens elsewhere).
func Parse(args []string, getenv func(string) string) (*Options, error) {
	if len(args) == 0 {
		return nil, errors.New("no argv[0]")
	}
	o := &Options{Component: filepath.Base(args[0]), Mode: Mode(getenv(EnvMode)), EventsFile: getenv(EnvEvents)}
	if c := getenv(EnvComponent); c != "" {
		o.Component = c
	}
	comp, ok := Components[o.Component]
	if !ok {
		return nil, fmt.Errorf("unknown component %q (argv[0] or %s must be one of kube-apiserver, kube-controller-manager, kube-scheduler, kube-vip)", o.Component, EnvComponent)
	}
	o.componentOK = comp
	if o.Mode == "" {
		o.Mode = ModeHealthy
	}
	known := false
	for _, m := range Modes {
		known = known || m == o.Mode
	}
	if !known {
		return nil, fmt.Errorf("%s=%q: unknown mode (known: %v)", EnvMode, o.Mode, Modes)
	}
	var err error
	if o.CrashAfter, err = envDuration(getenv, EnvCrashAfter, 2*time.Second); err != nil {
		return nil, err
	}
	if o.ReadyAfter, err = envDuration(getenv, EnvReadyAfter, 0); err != nil {
		return nil, err
	}
	port, host := comp.DefaultPort, "127.0.0.1"
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			o.Unknown = append(o.Unknown, a) // a positional argument (kube-vip's "manager")
			continue
		}
		if (name == "secure-port" || name == "bind-address") && !hasVal {
			if i+1 >= len(rest) {
				return nil, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			val = rest[i]
		}
		switch name {
		case "secure-port":
			p, err := strconv.Atoi(val)
			if err != nil || p < 0 || p > 65535 {
				return nil, fmt.Errorf("--secure-port=%q: not a port number", val)
			}
			port = p
		case "bind-address":
			ip := net.ParseIP(val)
			switch {
			case ip == nil:
				return nil, fmt.Errorf("--bind-address=%q: not an IP address", val)
			case ip.IsLoopback():
				host = ip.String()
			case ip.IsUnspecified():
				// The real component listens everywhere, loopback included;
				// the stand-in listens on loopback only.
			default:
				return nil, fmt.Errorf("--bind-address=%s: the stand-in listens only on loopback", val)
			}
		case "permit-port-sharing", "permit-address-sharing":
			// pflag's bool: bare means true, a value must follow "=".
			b := true
			if hasVal {
				if b, err = strconv.ParseBool(val); err != nil {
					return nil, fmt.Errorf("--%s=%q: invalid boolean", name, val)
				}
			}
			if name == "permit-port-sharing" {
				o.PermitPortSharing = b
			} else {
				o.PermitAddressSharing = b
			}
		default:
			o.Unknown = append(o.Unknown, a)
		}
	}
	if comp.DefaultPort != 0 && port != 0 {
		o.Addr = net.JoinHostPort(host, strconv.Itoa(port))
	}
	return o, nil
}

func envDuration(getenv func(string) string, key string, def time.Duration) (time.Duration, error) {
	v := getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: not a non-negative Go duration", key, v)
	}
	return d, nil
}

// Main runs the stand-in for argv args with the process environment and
// returns the exit code: 0 after SIGTERM or SIGINT, 1 for ModeExitAtStart,
// ModeCrashAfter and a listener that fails, 2 for a bad invocation.
func Main(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	o, err := Parse(args, os.Getenv)
	if err != nil {
		log.Error("component stand-in: bad invocation", "err", err)
		return 2
	}
	sigs := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if o.Mode == ModeIgnoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
		sigs = sigs[1:] // NotifyContext on SIGTERM would un-ignore it
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	return Run(ctx, o, log)
}

// Run runs the stand-in described by o until ctx is done (a graceful stop,
// exit code 0) or its mode ends it. It never returns for ModeIgnoreSIGTERM
// unless ctx is done by something other than SIGTERM.
func Run(ctx context.Context, o *Options, log *slog.Logger) int {
	log = log.With("component", o.Component, "pid", os.Getpid(), "mode", o.Mode)
	rec := &recorder{o: o, log: log}
	rec.record(EventStart, "", strings.Join(o.Unknown, " "))
	log.Info("component stand-in starting", "addr", o.Addr, "ignoredArgs", len(o.Unknown))
	switch o.Mode {
	case ModeExitAtStart:
		rec.record(EventExit, "", "exit-at-start")
		log.Info("exiting at start as configured")
		return 1
	case ModeNeverListen:
		<-ctx.Done()
		return 0
	}
	var crash <-chan time.Time
	if o.Mode == ModeCrashAfter {
		crash = time.After(o.CrashAfter)
	}
	var srvErr chan error
	var srv *http.Server
	if o.Addr != "" {
		var err error
		srv, srvErr, err = serve(o, rec)
		if err != nil {
			log.Error("listen failed", "addr", o.Addr, "err", err)
			rec.record(EventExit, o.Addr, err.Error())
			return 1
		}
	}
	select {
	case <-ctx.Done():
		log.Info("terminating on signal")
		if srv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
		}
		return 0
	case <-crash:
		log.Info("crashing as configured", "after", o.CrashAfter)
		rec.record(EventExit, o.Addr, "crash-after")
		return 1
	case err := <-srvErr:
		log.Error("server failed", "err", err)
		rec.record(EventExit, o.Addr, err.Error())
		return 1
	}
}

func serve(o *Options, rec *recorder) (*http.Server, chan error, error) {
	cert, err := selfSigned()
	if err != nil {
		return nil, nil, err
	}
	ln, err := listen(o, rec.log)
	if err != nil {
		return nil, nil, err
	}
	rec.record(EventListen, o.Addr, sharing(o))
	start := time.Now()
	var once sync.Once
	mux := http.NewServeMux()
	for _, p := range o.componentOK.Paths {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			if o.Mode == ModeUnhealthy || time.Since(start) < o.ReadyAfter {
				http.Error(w, "[-]standin failed: mode "+string(o.Mode), http.StatusInternalServerError)
				return
			}
			// The answer as kube-apiserver's healthz handler gives it
			// (k8s.io/apiserver/pkg/server/healthz, handleRootHealth):
			// "ok" written whole, so net/http sends it with its length in
			// one write. The flush, so that the event below is recorded
			// once the answer is on the wire, would otherwise make it
			// chunked, with its last chunk in a write of its own.
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Content-Length", "2")
			_, _ = io.WriteString(w, "ok")
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			once.Do(func() { rec.record(EventHealthy, o.Addr, r.URL.Path) })
		})
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:          nil,
	}
	errc := make(chan error, 1)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	return srv, errc, nil
}

// listen opens o.Addr as k8s.io/apiserver's SecureServingOptions.ApplyTo
// does (options/serving.go, serving_unix.go): SO_REUSEPORT when
// --permit-port-sharing, SO_REUSEADDR when --permit-address-sharing, a
// failed setsockopt only logged. Without SO_REUSEPORT on every socket of
// the port, a second instance's bind fails with EADDRINUSE, as the real
// component's does. (Go sets SO_REUSEADDR on every TCP listener anyway.)
func listen(o *Options, log *slog.Logger) (net.Listener, error) {
	var lc net.ListenConfig
	if o.PermitPortSharing || o.PermitAddressSharing {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				if o.PermitPortSharing {
					if err := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
						log.Warn("failed to set SO_REUSEPORT on socket", "err", err)
					}
				}
				if o.PermitAddressSharing {
					if err := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
						log.Warn("failed to set SO_REUSEADDR on socket", "err", err)
					}
				}
			})
		}
	}
	return lc.Listen(context.Background(), "tcp", o.Addr)
}

// sharing is the listen event's detail: which sharing the socket allows.
func sharing(o *Options) string {
	var s []string
	if o.PermitPortSharing {
		s = append(s, "SO_REUSEPORT")
	}
	if o.PermitAddressSharing {
		s = append(s, "SO_REUSEADDR")
	}
	return strings.Join(s, ",")
}

type recorder struct {
	o   *Options
	log *slog.Logger
	mu  sync.Mutex
}

// record appends one event with a single write(2) to an O_APPEND file, so
// lines from concurrent stand-ins sharing the file never interleave.
func (r *recorder) record(kind, addr, detail string) {
	if r.o.EventsFile == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(Event{Time: time.Now(), Event: kind, Component: r.o.Component, PID: os.Getpid(), Mode: r.o.Mode, Addr: addr, Detail: detail})
	f, err := os.OpenFile(r.o.EventsFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		r.log.Error("record event", "file", r.o.EventsFile, "err", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		r.log.Error("record event", "file", r.o.EventsFile, "err", err)
	}
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "component-standin"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-sign certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
