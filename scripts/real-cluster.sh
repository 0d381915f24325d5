#!/usr/bin/env bash
# make real-cluster: the real kubeadm HA cluster of issue 38
# (docs/real-cluster.md): three nodes in their own namespaces, each with
# its own containerd and the real kubelet v1.36.3, made by the real
# kubeadm v1.36.3 (init, join --control-plane), adopted by
# stratum-upgrade, then the scenarios under writers and probes, each
# printing its figure line. SCENARIOS=all runs every scenario (about 40
# minutes); unset, the ones make check runs (upgrade, kubelet-restart).
# Needs root; installs containerd, runc and containernetworking-plugins
# (the nodes' pod network) with apt-get when missing.
# Builds what it runs into $STRATUM_CACHE (default ~/.cache/stratum-upgrade)
# first, outside the test's timeout: kubelet v1.36.3 (about 100 s cold
# once the control plane of its tool module is built), and the control
# planes and kubeadms of v1.36.3 and v1.37.2 that make test-real builds too.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "real-cluster: must run as root (namespaces, containerd, kubelet)" >&2
	exit 1
fi
if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || [ ! -x /usr/lib/cni/bridge ]; then
	echo "real-cluster: installing containerd, runc and containernetworking-plugins"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc containernetworking-plugins >/dev/null
fi
start=$(date +%s)
go run ./internal/harness/cmd/realclusterbins
echo "real-cluster: binaries ready after $(( $(date +%s) - start ))s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
log=$(mktemp /tmp/real-cluster-XXXXXX.log)
status=0
STRATUM_REAL_CLUSTER=1 STRATUM_REAL_CLUSTER_SCENARIOS="${SCENARIOS:-}" \
	go test -p 1 -count=1 -v -timeout 75m ./internal/harness/realcluster 2>&1 | tee "$log" || status=$?
echo
echo "real-cluster: figures (load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; full log: $log)"
grep -h '^real cluster ' "$log" || echo "real-cluster: no figure line"
if [ "$status" != 0 ]; then
	echo "real-cluster: FAILED after $(( $(date +%s) - start ))s; the failed tests:"
	grep -E '^\s*--- FAIL' "$log" || true
	exit "$status"
fi
echo "real-cluster: passed in $(( $(date +%s) - start ))s"
