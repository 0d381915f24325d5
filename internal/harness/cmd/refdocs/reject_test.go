package main

import (
	"regexp"
	"strings"
	"testing"
)

// A value of each leaf field that the page's "Accepted" does not allow,
// set in the full example (whose other fields are valid): the decoder must
// refuse it, naming the field.
var rejected = map[string]map[string]any{
	"node-state.md": {
		"apiVersion":                         "stratum.ciq.com/v2",
		"kind":                               "NodeStates",
		"nodeName":                           "CP_2",
		"advertiseAddress":                   "10.0.0.12/24",
		"kubernetesVersion":                  "1.34.4",
		"imageRepository":                    "registry.k8s.io/k8s:v1",
		"images":                             map[string]any{"etcd": "Registry.k8s.io/etcd:3.5.35-0"},
		"versions":                           map[string]any{"etcd": "3.5"},
		"etcd.memberName":                    "Cp-2",
		"etcd.initialCluster":                "cp-2=10.0.0.12:2380",
		"etcd.initialClusterState":           "joining",
		"etcd.dataDir":                       "var/lib/etcd",
		"etcd.terminationGracePeriodSeconds": 0,
		"vip.address":                        "10.0.0.12",
		"vip.interface":                      "an-interface-name-too-long",
		"profile.name":                       "strict",
		"profile.auditPolicyFile":            "audit-policy.yaml",
		"profile.admissionConfigFile":        "/etc/stratum/../admission.yaml",
		"profile.auditLogDir":                "/var/log/kubernetes/audit/",
		"pkiDir":                             "/etc/kubernetes//pki",
		"kubeconfigDir":                      "etc/kubernetes",
		"configDir":                          "/etc/kubernetes/./stratum",
		"caCertDirs":                         []any{"/etc/ssl/certs"},
		"networking.serviceCIDR":             "10.96.0.0",
		"networking.podCIDR":                 "10.244.0.0/33",
		"networking.dnsDomain":               "Cluster_Local",
		"ports.etcdClient":                   70000,
		"ports.etcdPeer":                     2379,
		"ports.etcdMetrics":                  -1,
		"ports.apiServer":                    65536,
		"ports.controllerManager":            6443,
		"ports.scheduler":                    10357,
		"extraArgs":                          map[string]any{"kube-apiserver": map[string]any{"--event-ttl": "1h"}},
		"stopped":                            []any{"kube-scheduler", "kube-scheduler"},
		"extraArgsOrder":                     map[string]any{"kube-apiserver": []any{"not-an-extra-arg"}},
		"adoptedInputs":                      map[string]any{"kube-scheduler": "not-a-digest"},
		"extraVolumes":                       map[string]any{"kube-apiserver": []any{map[string]any{"name": "log", "hostPath": "var/log", "mountPath": "/var/log"}}},
		"extraEnvs":                          map[string]any{"etcd": []any{map[string]any{"name": "A", "value": "1"}, map[string]any{"name": "A", "value": "2"}}},
		"resources":                          map[string]any{"etcd": map[string]any{"requests": map[string]any{"cpu": "lots"}}},
		"patches.directory":                  "patches/",
		"patches.files":                      []any{map[string]any{"name": "kube-proxy.yaml", "content": "a: b"}},
	},
	"release.md": {
		"apiVersion":        "v1",
		"kind":              "Releases",
		"kubernetesVersion": "v1.34",
		"images":            map[string]any{"kube-proxy": "registry.k8s.io/kube-proxy:v1.34.5"},
		"versions":          map[string]any{"etcd": "3.6.16", "kube-proxy": "v1.34.5"},
	},
}

func TestRejected(t *testing.T) {
	for _, c := range []struct {
		s      spec
		decode func([]byte) error
	}{{nodeStatePage, decodeState}, {releasePage, decodeRelease(t)}} {
		p, err := load(repoRoot(t), c.s)
		if err != nil {
			t.Fatal(err)
		}
		full := example(t, c.s.Full)
		for _, f := range p.fields {
			if f.Object {
				continue
			}
			bad, ok := rejected[c.s.File][f.Path]
			if !ok {
				t.Errorf("%s: %s: the test has no value the page does not accept: add one to rejected", c.s.File, f.Path)
				continue
			}
			err := c.decode(with(t, full, f.Path, bad, false))
			if err == nil || !strings.Contains(err.Error(), f.Path) {
				t.Errorf("%s: %s: %v: %v, want an error naming %s", c.s.File, f.Path, bad, err, f.Path)
			}
		}
	}
}

// Each etcd flag the page says extraArgs cannot set is refused.
func TestOwnedEtcdFlagsRefused(t *testing.T) {
	full := example(t, nodeStatePage.Full)
	flags := regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(ownedEtcdFlagList, -1)
	if len(flags) < 10 {
		t.Fatalf("found %d flags in %q", len(flags), ownedEtcdFlagList)
	}
	for _, m := range flags {
		err := decodeState(with(t, full, "extraArgs.etcd."+m[1], "x", false))
		if want := "extraArgs.etcd." + m[1]; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("extraArgs.etcd.%s: %v, want an error naming %s", m[1], err, want)
		}
	}
	// Another etcd flag is let through.
	if err := decodeState(with(t, full, "extraArgs.etcd.snapshot-count", "5000", false)); err != nil {
		t.Errorf("extraArgs.etcd.snapshot-count: %v", err)
	}
}
