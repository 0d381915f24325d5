// Package cluster coordinates the control-plane nodes of one cluster
// through the cluster's own etcd.
//
// keys.go, coordinator.go, hold.go and view.go are the rollout: a
// lease-backed lock so that one node at a time runs a transaction, each
// node's progress, and the halt a rolled-back transaction sets (the keys
// are described in keys.go and docs/ha.md); forget.go closes the open
// transaction of a node that died for good, so the rollout can go on.
// endpoints.go keeps the members' client URLs for a node whose own etcd
// is down.
//
// gate.go is the quorum gate a node passes before it touches its own etcd
// member: CheckQuorum (every member started and healthy, the cluster keeps
// quorum without this member), MoveLeaderOff (leadership moved to another
// member first) and WaitCaughtUp (after the step, the member has rejoined
// and caught up before the next component).
package cluster
