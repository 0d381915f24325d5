package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// InputsAnnotation carries, on every component's pod, a sha256 over the
// files the component reads only when it starts (InputPaths): the
// certificates, keys and kubeconfigs its flags name that it does not reload
// by itself. Its manifest names those files without their contents, so
// after a rotation the running process would keep the old ones; with the
// hash in the manifest, the render changes and a transaction restarts
// exactly the components that read a changed file. Files the component
// reloads by itself (docs/component-inputs.md) do not contribute. The
// audit policy and the admission configuration keep their own annotations
// (AuditPolicyAnnotation, AdmissionConfigAnnotation) and are not hashed
// here again.
const InputsAnnotation = "stratum.ciq.com/inputs-sha256"

// InputFile is one start-only input file as LoadInputs found it: absent,
// or present with its size and sha256. The contents themselves are not
// kept (several are private keys).
type InputFile struct {
	Present bool
	Size    int
	SHA256  [sha256.Size]byte
}

// Inputs maps the path of every start-only input file of a node's roster
// (InputPaths) to what LoadInputs found there.
type Inputs map[string]InputFile

// startOnlyFlags names, per component, the flags stratum renders (or an
// extra arg may set) whose file the component reads only when it starts.
// Read from each component's source; docs/component-inputs.md has the
// table with the function that shows each one, and the flags the
// component reloads (which are deliberately absent here):
//
//   - etcd: --trusted-ca-file and --peer-trusted-ca-file become the
//     listeners' ClientCAs/RootCAs once (client/pkg/transport
//     TLSInfo.ServerConfig/ClientConfig); --cert-file, --key-file and the
//     peer pair are read again at each handshake (TLSInfo.baseConfig's
//     GetCertificate/GetClientCertificate).
//   - kube-apiserver: --etcd-cafile (etcd TLSInfo.ClientConfig, once, in
//     storagebackend/factory/etcd3.go newETCD3Client),
//     --service-account-key-file (keyutil.PublicKeysFromFile at config
//     build), --service-account-signing-key-file (keyutil.PrivateKeyFromFile
//     at config build), --encryption-provider-config unless
//     --encryption-provider-config-automatic-reload=true. The serving pair,
//     the client and request-header CAs, the front-proxy client pair
//     (dynamiccertificates) and the kubelet and etcd client pairs
//     (reloaded per connection) are not here.
//   - kube-controller-manager: its kubeconfigs (clientcmd, once),
//     --root-ca-file (readCA when the token and root-ca-cert-publisher
//     controllers start), --service-account-private-key-file
//     (keyutil.PrivateKeyFromFile when the token controller starts). The
//     cluster signing pair (csrsigning's dynamiccertificates provider) and
//     the client and request-header CAs are reloaded.
//   - kube-scheduler: its kubeconfigs (clientcmd, once).
//
// kube-vip has no flag set here: its one input, the kubeconfig its
// --k8sConfigPath names (read once, in manager.New), is added by
// InputPaths from kubeVIPKubeconfig.
var startOnlyFlags = map[string][]string{
	nodestate.Etcd:              {"peer-trusted-ca-file", "trusted-ca-file"},
	nodestate.KubeAPIServer:     {"encryption-provider-config", "etcd-cafile", "service-account-key-file", "service-account-signing-key-file"},
	nodestate.ControllerManager: {"authentication-kubeconfig", "authorization-kubeconfig", "kubeconfig", "root-ca-file", "service-account-private-key-file"},
	nodestate.Scheduler:         {"authentication-kubeconfig", "authorization-kubeconfig", "kubeconfig"},
}

// listFlags are the start-only flags that take a comma-separated list of
// files (kube-apiserver's --service-account-key-file is a string slice);
// given more than once, such a flag reads the files of every value.
var listFlags = map[string]bool{"service-account-key-file": true}

// reloadSwitches turn a start-only flag into a reloaded one when set to
// "true".
var reloadSwitches = map[string]string{"encryption-provider-config": "encryption-provider-config-automatic-reload"}

// kubeVIPKubeconfig is the kubeconfig kube-vip's --k8sConfigPath names.
func kubeVIPKubeconfig(st *nodestate.NodeState) string {
	return filepath.Join(st.KubeconfigDir, "admin.conf")
}

// InputPaths is the start-only input files of component name on st's
// node, sorted and without duplicates, derived from the final flag set the
// render writes (extra args applied), so the files and the flags cannot
// disagree. A name outside NamesFor(st) is an error.
func InputPaths(st *nodestate.NodeState, name string) ([]string, error) {
	if err := checkRoster(st, name); err != nil {
		return nil, fmt.Errorf("inputs of %s: %w", name, err)
	}
	v, err := versions.Of(resolve.Resolve(st), name)
	if err != nil {
		return nil, fmt.Errorf("inputs of %s: %w", name, err)
	}
	return inputPaths(st, name, v), nil
}

func inputPaths(st *nodestate.NodeState, name string, v *version.Version) []string {
	if name == nodestate.KubeVIP {
		return []string{kubeVIPKubeconfig(st)}
	}
	a := componentArgs(st, name, v)
	var out []string
	for _, flag := range startOnlyFlags[name] {
		val := a[flag]
		if val == "" || a[reloadSwitches[flag]] == "true" {
			continue
		}
		if !listFlags[flag] {
			out = append(out, val)
			continue
		}
		// A list flag given more than once accumulates its values.
		for _, val := range flagValues(st, name, a, flag) {
			for p := range strings.SplitSeq(val, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// LoadInputs reads every start-only input file of st's roster
// (InputPaths) and keeps its size and sha256. It does not follow a symlink
// at a file's last element (durable.ReadRegular). A file that does not
// exist is recorded as absent, not an error: a fresh node may not have its
// PKI yet, and the component would not start without it anyway; its hash
// changes when the file appears. Any other failure (a symlink, a directory,
// a permission error) is an error naming the file and the component. A
// component whose version st does not resolve contributes nothing: Render
// reports that.
func LoadInputs(st *nodestate.NodeState) (Inputs, error) {
	in := Inputs{}
	n := resolve.Resolve(st)
	for _, name := range NamesFor(st) {
		v, err := versions.Of(n, name)
		if err != nil {
			continue
		}
		for _, p := range inputPaths(st, name, v) {
			if _, done := in[p]; done {
				continue
			}
			b, _, err := durable.ReadRegular(p)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				in[p] = InputFile{}
			case err != nil:
				return nil, fmt.Errorf("start-only input of %s: %w", name, err)
			default:
				in[p] = InputFile{Present: true, Size: len(b), SHA256: sha256.Sum256(b)}
			}
		}
	}
	return in, nil
}

// hash is InputsAnnotation's value for the files paths: sha256 over each
// path in sorted order, framed by its quoted path, then either "absent" or
// its size and sha256. A path in is missing hashes as absent, so the value
// depends on paths and in alone.
func (in Inputs) hash(paths []string) string {
	h := sha256.New()
	for _, p := range slices.Sorted(slices.Values(paths)) {
		f := in[p]
		if !f.Present {
			fmt.Fprintf(h, "\x00input %q absent\x00", p)
			continue
		}
		fmt.Fprintf(h, "\x00input %q %d\x00", p, f.Size)
		h.Write(f.SHA256[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// InputsOnly reports whether b, a manifest as on disk, differs from the
// render of component name from st and prof (with b's own restarted-at
// stamp) in InputsAnnotation alone: its value differs, or b has none (it
// was written before the annotation existed). So a start-only input file
// changed since b was written, and nothing else did. It is false when b
// is exactly the render, when anything else differs, and when b does not
// decode or st does not render name.
func InputsOnly(st *nodestate.NodeState, prof Profile, name string, b []byte) bool {
	pod, err := DecodePod(b)
	if err != nil {
		return false
	}
	want, err := Render(st, prof, name, RestartedAt(pod))
	if err != nil {
		return false
	}
	old, had := pod.Annotations[InputsAnnotation]
	cur, wants := want.Annotations[InputsAnnotation]
	if had == wants && old == cur {
		return false // the annotation is as rendered (or absent on both, adopted)
	}
	if had {
		annotate(want, InputsAnnotation, old)
	} else {
		delete(want.Annotations, InputsAnnotation)
		if len(want.Annotations) == 0 {
			want.Annotations = nil // as a pod without annotations renders
		}
	}
	wb, err := Encode(want)
	return err == nil && bytes.Equal(wb, b)
}
