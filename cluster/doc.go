// Package cluster coordinates the control-plane nodes of one cluster
// through the cluster's own etcd.
//
// gate.go is the quorum gate a node passes before it touches its own etcd
// member: CheckQuorum (every member started and healthy, the cluster keeps
// quorum without this member), MoveLeaderOff (leadership moved to another
// member first) and WaitCaughtUp (after the step, the member has rejoined
// and caught up before the next component).
package cluster
