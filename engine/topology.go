package engine

// Whether this node's etcd is one of several members: decided once per
// transaction from the live cluster's member list and passed down. The node
// state's etcd.initialCluster is a bootstrap input (kubeadm never rewrites
// the first node's) and never decides it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// ErrTopologyUnknown: etcd's member list cannot be read and this node has
// no record of its member count, so whether its etcd is the cluster's only
// member is not known (and not guessed).
var ErrTopologyUnknown = errors.New("the etcd cluster's member count is unknown")

// topology is how many members this node's etcd cluster has, and where
// that was read.
type topology struct {
	members int
	// source says where members came from, for the log and errors.
	source string
	// kept is what keep records: the member list read live now, or the
	// count the operator stated now; nil when neither.
	kept *cluster.Members
}

// single reports whether this node's etcd is the cluster's only member.
func (t topology) single() bool { return t.members == 1 }

// statedByFlag is who stated a count given with --etcd-members.
const statedByFlag = "the operator, with --etcd-members"

// topology reads the member list through this node's client certificate
// (its own member, then the endpoints kept from the last read); keep keeps
// it beside the journal once a transaction is driven. The live list always
// wins, and a stated count it contradicts is reported. When etcd cannot
// be reached it falls back to the count the operator states now
// (Coordination.Members), then to the count kept last (read or stated),
// then to the member count of the newest etcd backup the journal holds
// (read from the live cluster when it was taken); with none, it is
// ErrTopologyUnknown. The coordinator it reached the cluster with is
// returned for the caller to use and close (nil when it fell back).
func (e *Engine) topology(ctx context.Context, st *nodestate.NodeState, txn string) (topology, *cluster.Coordinator, error) {
	known, lerr := cluster.LoadMembers(e.membersPath())
	if lerr != nil {
		e.log.Warn("ignoring the etcd member count kept before", "err", lerr)
	}
	stated := e.coord.Members
	c, err := cluster.Connect(ctx, e.clusterConfig(st, txn))
	if err == nil {
		m := c.Members()
		if stated > 0 && stated != m.Count {
			e.log.Warn(fmt.Sprintf("--etcd-members %d is not etcd's member list (%d members): going by etcd's", stated, m.Count))
		}
		if known != nil && known.StatedBy != "" && known.Count != m.Count {
			e.log.Warn(fmt.Sprintf("the etcd member count stated by %s at %s (%d) is not etcd's member list (%d members): going by etcd's, which replaces it in %s",
				known.StatedBy, known.At.Format(time.RFC3339), known.Count, m.Count, e.membersPath()))
		}
		return topology{members: m.Count, source: "etcd's member list", kept: &m}, c, nil
	}
	if stated > 0 {
		if known != nil && known.Count != stated {
			e.log.Warn(fmt.Sprintf("--etcd-members %d is not the member count kept in %s (%d, %s): going by the one stated now", stated, e.membersPath(), known.Count, knownSource(known)))
		}
		e.log.Info("etcd's member list cannot be read; using the member count stated with --etcd-members", "members", stated, "err", err)
		m := cluster.Members{Count: stated, At: time.Now().UTC(), StatedBy: statedByFlag}
		return topology{members: stated, source: "--etcd-members (etcd cannot be reached now)", kept: &m}, nil, nil
	}
	if known != nil {
		e.log.Info("etcd's member list cannot be read; using the member count kept last", "members", known.Count, "source", knownSource(known), "err", err)
		return topology{members: known.Count, source: knownSource(known) + " (etcd cannot be reached now)"}, nil, nil
	}
	if n, id := e.journaledMembers(); n > 0 {
		e.log.Info("etcd's member list cannot be read; using the member count of the last etcd backup", "members", n, "txn", id, "err", err)
		return topology{members: n, source: "the etcd backup of transaction " + id + " (etcd cannot be reached now)"}, nil, nil
	}
	return topology{}, nil, fmt.Errorf("%w: etcd's member list cannot be read (%v) and this node has no record of it (%s): whether this node's etcd is the cluster's only member decides whether it takes the rollout lock and passes the quorum gate, so nothing was done; make etcd answer (its container log; `etcdctl endpoint health`) and run the command again, or, if etcd cannot answer before this command runs, state the count you know: the same command with --etcd-members N",
		ErrTopologyUnknown, err, e.membersPath())
}

// knownSource says where a kept count came from: read from etcd's member
// list, or stated, and when.
func knownSource(m *cluster.Members) string {
	if m.StatedBy != "" {
		return "stated by " + m.StatedBy + " at " + m.At.Format(time.RFC3339)
	}
	return "the member list read at " + m.At.Format(time.RFC3339)
}

// keep keeps a member list read live, or a count stated now, and the
// members' client URLs c reached, for a later command run while etcd
// cannot be reached; a failure costs only that fallback. A command
// refused before its transaction keeps nothing.
func (e *Engine) keep(t topology, c *cluster.Coordinator) {
	if t.kept == nil {
		return
	}
	if err := cluster.SaveMembers(e.membersPath(), *t.kept); err != nil {
		e.log.Warn("could not keep etcd's member count for when etcd cannot be reached", "err", err)
	}
	if t.members > 1 && c != nil {
		e.saveEndpoints(c.Endpoints())
	}
}

// journaledMembers is the member count of the newest etcd backup in the
// journal (the open transaction's first) and its transaction; 0 when none.
func (e *Engine) journaledMembers() (int, string) {
	var txns []journal.Txn
	if open, err := e.j.OpenTxn(); err == nil && open != nil {
		txns = append(txns, *open)
	}
	if hist, err := e.j.History(0); err == nil {
		txns = append(txns, hist...)
	}
	for _, t := range txns {
		if len(t.EtcdBackup) == 0 {
			continue
		}
		var b etcddata.Backup
		if err := json.Unmarshal(t.EtcdBackup, &b); err == nil && b.Members > 0 {
			return b.Members, t.ID
		}
	}
	return 0, ""
}

func (e *Engine) membersPath() string {
	return filepath.Join(filepath.Dir(e.j.Path()), cluster.MembersFile)
}
