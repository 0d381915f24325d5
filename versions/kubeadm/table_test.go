package kubeadm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

func TestEtcdPairing(t *testing.T) {
	for _, c := range []struct {
		kube, tag, etcd string
	}{
		{"v1.34.0", "3.6.5-0", "3.6.5"},
		{"v1.34.4", "3.6.5-0", "3.6.5"},
		{"v1.35.4", "3.6.6-0", "3.6.6"},
		{"v1.36.3", "3.6.8-0", "3.6.8"},
		{"v1.37.2", "3.7.0-0", "3.7.0"},
		{"v1.37.9-rc.0", "3.7.0-0", "3.7.0"},
	} {
		v := version.MustParseSemantic(c.kube)
		tag, err := EtcdTag(v)
		if err != nil || tag != c.tag {
			t.Errorf("EtcdTag(%s) = %q, %v; want %q", c.kube, tag, err, c.tag)
		}
		ev, err := EtcdVersion(v)
		if err != nil || ev.String() != c.etcd {
			t.Errorf("EtcdVersion(%s) = %v, %v; want %s", c.kube, ev, err, c.etcd)
		}
	}
	for _, kube := range []string{"v1.33.9", "v1.38.0", "v2.34.0"} {
		_, err := EtcdTag(version.MustParseSemantic(kube))
		var ue *UnknownMinorError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnknownMinor) || !strings.Contains(err.Error(), kube) || !strings.Contains(err.Error(), "1.34, 1.35, 1.36, 1.37") {
			t.Errorf("EtcdTag(%s): got %v, want an UnknownMinorError naming it and the known minors", kube, err)
		}
	}
}

func TestNewestAndNext(t *testing.T) {
	for _, c := range []struct {
		kube, newest, next, nextNewest string
	}{
		{"v1.34.2", "v1.34.4", "1.35", "v1.35.4"},
		{"v1.35.4", "v1.35.4", "1.36", "v1.36.3"},
		{"v1.36.1", "v1.36.3", "1.37", "v1.37.2"},
		{"v1.37.2", "v1.37.2", "", ""},
	} {
		v := version.MustParseSemantic(c.kube)
		m, ok := Lookup(v)
		if !ok || m.Newest() != c.newest {
			t.Errorf("Lookup(%s).Newest() = %q (%v), want %q", c.kube, m.Newest(), ok, c.newest)
		}
		n, ok := Next(v)
		if n.Minor != c.next || ok != (c.next != "") {
			t.Errorf("Next(%s) = %q, %v; want %q", c.kube, n.Minor, ok, c.next)
		}
		if ok && n.Newest() != c.nextNewest {
			t.Errorf("Next(%s).Newest() = %q, want %q", c.kube, n.Newest(), c.nextNewest)
		}
	}
}

// TestTableWellFormed holds every row to its own claims: its patches are of
// its minor, sorted, and its source names the kubeadm whose table it is;
// etcd never goes down from one minor to the next (kubeadm never pairs a
// newer Kubernetes with an older etcd).
func TestTableWellFormed(t *testing.T) {
	var prevEtcd *version.Version
	for i, m := range Table {
		if i > 0 && !version.MustParseGeneric(Table[i-1].Minor).LessThan(version.MustParseGeneric(m.Minor)) {
			t.Errorf("row %s: rows must be oldest first", m.Minor)
		}
		for j, p := range m.Patches {
			pv, err := version.ParseSemantic(p)
			if err != nil || !strings.HasPrefix(p, "v"+m.Minor+".") {
				t.Errorf("row %s: patch %q is no release of the minor", m.Minor, p)
				continue
			}
			if j > 0 && !version.MustParseSemantic(m.Patches[j-1]).LessThan(pv) {
				t.Errorf("row %s: patches must be oldest first", m.Minor)
			}
		}
		if !strings.Contains(m.EtcdSource, "kubeadm v"+m.Minor+".") || !strings.Contains(m.EtcdSource, m.Etcd) {
			t.Errorf("row %s: source %q must name a kubeadm of the minor and the tag %s", m.Minor, m.EtcdSource, m.Etcd)
		}
		ev, err := EtcdVersion(version.MustParseSemantic(m.Newest()))
		if err != nil {
			t.Fatal(err)
		}
		if prevEtcd != nil && ev.LessThan(prevEtcd) {
			t.Errorf("row %s: etcd %s is older than the previous minor's %s", m.Minor, ev, prevEtcd)
		}
		prevEtcd = ev
	}
}

// TestTableMatchesKubeadmSource reads SupportedEtcdVersion from the source
// each row names, where the module cache has that k8s.io/kubernetes (the
// real-binary builds put 1.36 and 1.37 there), and checks the row's tag
// against the entry kubeadm's EtcdSupportedVersion picks for the minor.
func TestTableMatchesKubeadmSource(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	cache := strings.TrimSpace(string(out))
	entry := regexp.MustCompile(`(?m)^\s*(\S+):\s*"([0-9.]+-[0-9]+)",`)
	checked := 0
	for _, m := range Table {
		kubeadm := strings.Fields(strings.TrimPrefix(m.EtcdSource, "kubeadm "))[0]
		kubeadm = strings.TrimSuffix(kubeadm, ",")
		src, err := os.ReadFile(filepath.Join(cache, "k8s.io", "kubernetes@"+kubeadm, "cmd/kubeadm/app/constants/constants.go"))
		if err != nil {
			t.Logf("row %s: %s not in the module cache, not checked", m.Minor, kubeadm)
			continue
		}
		_, body, _ := strings.Cut(string(src), "SupportedEtcdVersion = map[uint8]string{")
		body, _, _ = strings.Cut(body, "}")
		minor := version.MustParseGeneric(m.Minor).Minor()
		// The keys are numbers, or the skewed-version expression of
		// kubeadm 1.35 (0 is this minor, -1 the one before).
		var want, highest string
		var highestKey uint
		for _, e := range entry.FindAllStringSubmatch(body, -1) {
			key := e[1]
			var k uint
			switch {
			case strings.Contains(key, "getSkewedKubernetesVersion(0)"):
				k = minor
			case strings.Contains(key, "getSkewedKubernetesVersion(-1)"):
				k = minor - 1
			case strings.Contains(key, "getSkewedKubernetesVersion(-2)"):
				k = minor - 2
			default:
				v, err := version.ParseGeneric(strings.TrimSuffix(key, ":") + ".0")
				if err != nil {
					t.Fatalf("row %s: cannot read key %q of %s's SupportedEtcdVersion", m.Minor, key, kubeadm)
				}
				k = v.Major()
			}
			if k == minor {
				want = e[2]
			}
			if k >= highestKey {
				highestKey, highest = k, e[2]
			}
		}
		if want == "" && minor > highestKey {
			want = highest // EtcdSupportedVersion's fall-back
		}
		if want != m.Etcd {
			t.Errorf("row %s: etcd %s, but %s's SupportedEtcdVersion gives %q", m.Minor, m.Etcd, kubeadm, want)
		}
		checked++
	}
	if checked == 0 {
		t.Skip("no k8s.io/kubernetes of the table in the module cache")
	}
}
