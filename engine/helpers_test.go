package engine

import (
	"encoding/json"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/journal"
)

type kubeletImage = kubeletsim.Image

var jsonUnmarshal = json.Unmarshal

func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

// seedSingleMember keeps beside j the member list of a single-member etcd,
// as a command against a healthy etcd would have: a node of these tests
// runs no etcd, so the engine's topology falls back to it.
func seedSingleMember(t testing.TB, j *journal.Journal, member string) {
	t.Helper()
	m := cluster.Members{Count: 1, At: time.Now().UTC()}
	if err := cluster.SaveMembers(filepath.Join(filepath.Dir(j.Path()), cluster.MembersFile), m); err != nil {
		t.Fatal(err)
	}
}
