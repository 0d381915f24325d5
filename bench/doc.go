// Package bench holds stratum-upgrade's performance benchmarks: how fast
// and how cheaply the engine notices that kubelet has done its part, how
// close a whole upgrade comes to the time kubelet alone needs, how the
// /proc scan compares with pgrep on a crowded node, and what a journaled
// step costs in fsyncs. `make bench` runs them and bench/cmd/report turns
// their output into the table in docs/performance.md, which also defines
// every number precisely.
//
// The benchmarks run real processes (the test bed's kubelet stand-in, real
// etcd, the component stand-ins and, for the crowded-node scan, 10,000
// sleeping processes), so they are not part of `make test`; the package's
// tests only check the benchmark machinery itself.
package bench
