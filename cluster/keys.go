package cluster

// What the nodes of one cluster keep in its etcd to coordinate, and nothing
// else: the local journal stays the truth for its node.
//
// Every key lives under Prefix:
//
//	/stratum-upgrade/rollout/lock/<lease>   concurrency.Mutex: one node at a time
//	/stratum-upgrade/rollout/holder          JSON Holder, attached to the lock holder's lease
//	/stratum-upgrade/rollout/nodes/<node>    JSON Progress: the node's last transaction
//	/stratum-upgrade/rollout/halt            JSON Halt: set when a transaction ends rolled back
//	                                          or rollback-failed; only ClearHalt removes it
//
// A node's Progress is written only by that node, but for Forget (forget.go):
// an operator's command on another node closes the open transaction of a
// node that died for good. A node whose Progress is open (no outcome yet)
// owns the rollout, whether or not its lease still holds the lock: another
// node refuses to begin until that node's resume ends its transaction. The
// values are JSON so that etcdctl shows them.

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Prefix is the root of every key this package reads or writes.
const Prefix = "/stratum-upgrade/rollout/"

const (
	lockPrefix  = Prefix + "lock"
	holderKey   = Prefix + "holder"
	nodesPrefix = Prefix + "nodes/"
	haltKey     = Prefix + "halt"
)

// Progress is one node's last transaction as the cluster sees it.
type Progress struct {
	Node string `json:"node"`
	Txn  string `json:"txn"`
	Kind string `json:"kind"`
	// Phase is the journal phase last reported.
	Phase string `json:"phase"`
	// Outcome is empty while the transaction is open, then committed,
	// rolled-back or rollback-failed; forgotten when Forget closed it.
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Forgotten is who closed the transaction in the node's place, and why.
	Forgotten *Forgotten `json:"forgotten,omitempty"`
	// To is the target's Kubernetes and etcd versions, for status.
	To string `json:"to,omitempty"`
	// APIServerFrom and APIServerTo are the node's kube-apiserver version
	// before and after the transaction ("v1.36.3"): the other nodes' skew
	// check reads the node's kube-apiserver from them (APIServers).
	APIServerFrom string `json:"apiServerFrom,omitempty"`
	APIServerTo   string `json:"apiServerTo,omitempty"`
	// EtcdDowngrade is the minor ("3.5") of the etcd downgrade this
	// node's transaction enabled and has not cancelled, for status.
	EtcdDowngrade string    `json:"etcdDowngrade,omitempty"`
	Started       time.Time `json:"started"`
	Updated       time.Time `json:"updated"`
}

// Open reports whether the transaction has not ended.
func (p Progress) Open() bool { return p.Outcome == "" && p.Txn != "" }

// APIServers is the kube-apiserver versions the node may run by its
// record: the target once committed, the source once rolled back, either
// while open, after a failed rollback or once forgotten. Nil when the
// record holds none (a node whose transactions predate the fields).
func (p Progress) APIServers() []string {
	var out []string
	add := func(v string) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	switch p.Outcome {
	case "committed":
		add(p.APIServerTo)
	case "rolled-back":
		add(p.APIServerFrom)
	default:
		add(p.APIServerFrom)
		add(p.APIServerTo)
	}
	return out
}

// KindRollbackLast is the kind (journal.KindRollbackLast) of the one
// transaction a halt lets through while etcd downgrades.
const KindRollbackLast = "rollback-last"

// Halt stops the rollout: a node's transaction ended rolled back or
// rollback-failed, and no node begins another until an operator clears it.
type Halt struct {
	Node    string    `json:"node"`
	Txn     string    `json:"txn"`
	Outcome string    `json:"outcome"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

// Holder is the node holding the lock, with what it is doing.
type Holder struct {
	Node  string    `json:"node"`
	Kind  string    `json:"kind"`
	Since time.Time `json:"since"`
}

func encode(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), nil
}

func decode[T any](key string, b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("etcd key %s does not hold what stratum-upgrade wrote (%v); inspect it with etcdctl get %s", key, err, key)
	}
	return v, nil
}
