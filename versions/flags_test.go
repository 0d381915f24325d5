package versions

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestTablesCoverSupportedMinors pins that every supported minor of every
// component has its flag table (without one, CheckArgs refuses nothing),
// and that the Kubernetes tables are whole flag sets, hidden and deprecated
// flags included (flagtable's flagdump), not --help's, which leaves out
// flags the binaries still accept (kube-apiserver's --apiserver-count).
func TestTablesCoverSupportedMinors(t *testing.T) {
	for _, c := range []string{nodestate.Etcd, nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		for _, minor := range minorsOf(c) {
			name := "flags/" + c + "-" + minor + ".txt"
			b, err := flagFS.ReadFile(name)
			if err != nil {
				t.Errorf("%s %s: no table: %v", c, minor, err)
				continue
			}
			if got := len(acceptedFlags(c, version.MustParseGeneric(minor+".0"))); got < 10 {
				t.Errorf("%s: %d flags", name, got)
			}
			header, _, _ := strings.Cut(string(b), "\n")
			if !strings.Contains(header, minor) {
				t.Errorf("%s: header %q names another version", name, header)
			}
			if c != nodestate.Etcd && !strings.Contains(header, "hidden and deprecated ones included") {
				t.Errorf("%s: header %q: not a whole flag set (make flag-tables)", name, header)
			}
		}
	}
}
