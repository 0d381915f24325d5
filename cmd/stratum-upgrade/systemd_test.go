package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitDir is where the shipped systemd units live.
const unitDir = "../../deploy/systemd"

// unitKeys parses a unit file into section.key -> values (in order).
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: not key=value: %q", path, line)
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

func has(vals []string, want string) bool {
	for _, v := range vals {
		for _, f := range strings.Fields(v) {
			if f == want {
				return true
			}
		}
	}
	return false
}

// TestSystemdUnitOrdering checks the boot design of docs/operations.md:
// prepare runs before kubelet and waits for nothing; the full resume runs
// after kubelet and only with it.
func TestSystemdUnitOrdering(t *testing.T) {
	prep := unitKeys(t, filepath.Join(unitDir, "stratum-upgrade-prepare.service"))
	res := unitKeys(t, filepath.Join(unitDir, "stratum-upgrade-resume.service"))
	checks := []struct {
		what string
		ok   bool
	}{
		{"prepare: Before=kubelet.service", has(prep["Unit.Before"], "kubelet.service")},
		{"prepare: not After=kubelet.service", !has(prep["Unit.After"], "kubelet.service")},
		{"prepare: Type=oneshot", has(prep["Service.Type"], "oneshot")},
		{"prepare: runs resume --prepare", strings.HasSuffix(strings.Join(prep["Service.ExecStart"], ""), " resume --prepare")},
		{"prepare: WantedBy=kubelet.service", has(prep["Install.WantedBy"], "kubelet.service")},
		// A failed prepare (a damaged or empty journal: exit 1, the message
		// in journalctl -u) must not keep kubelet from starting.
		{"prepare: not RequiredBy/RequisiteOf/BindsTo/PartOf kubelet", len(prep["Install.RequiredBy"])+len(prep["Unit.RequisiteOf"])+len(prep["Unit.BindsTo"])+len(prep["Unit.PartOf"]) == 0},
		{"resume: no Requires/Requisite on prepare", !has(res["Unit.Requires"], "stratum-upgrade-prepare.service") && !has(res["Unit.Requisite"], "stratum-upgrade-prepare.service")},
		{"resume: After=kubelet.service", has(res["Unit.After"], "kubelet.service")},
		{"resume: After=stratum-upgrade-prepare.service", has(res["Unit.After"], "stratum-upgrade-prepare.service")},
		{"resume: Requires=kubelet.service", has(res["Unit.Requires"], "kubelet.service")},
		{"resume: not Before=kubelet.service", !has(res["Unit.Before"], "kubelet.service")},
		{"resume: Type=oneshot", has(res["Service.Type"], "oneshot")},
		{"resume: runs resume", strings.HasSuffix(strings.Join(res["Service.ExecStart"], ""), " resume")},
		{"resume: WantedBy=multi-user.target", has(res["Install.WantedBy"], "multi-user.target")},
	}
	for _, c := range checks {
		if !c.ok {
			t.Error(c.what)
		}
	}
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the units, with a
// stub kubelet.service and the binary path pointed at an existing program:
// any warning (unknown key, bad dependency, bad value) fails the test.
func TestSystemdUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var units []string
	for _, name := range []string{"stratum-upgrade-prepare.service", "stratum-upgrade-resume.service"} {
		b, err := os.ReadFile(filepath.Join(unitDir, name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "/usr/local/bin/stratum-upgrade", self)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, p)
	}
	stub := "[Unit]\nDescription=kubelet stub\n[Service]\nExecStart=/bin/true\n"
	if err := os.WriteFile(filepath.Join(dir, "kubelet.service"), []byte(stub), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, append([]string{"verify"}, units...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
