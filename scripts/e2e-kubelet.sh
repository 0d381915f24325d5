#!/usr/bin/env bash
# make e2e-kubelet: stratum-upgrade end to end against the real kubelets
# v1.37.2 (every scenario) and v1.34.4 (the upgrade, rollback and
# kill-resume scenarios) on containerd and runc (docs/e2e.md); KUBELET=v1.34.4
# (or 1.34, or a comma list) runs every scenario under the kubelet(s) named
# instead; KUBELET=1.35 runs v1.35.4, which only a selection runs (e2e.Kubelet
# OnlyWhenSelected). Needs root. Installs containerd and
# runc with apt-get when missing; the real etcds and Kubernetes control
# planes (kube-apiserver, -controller-manager, -scheduler v1.36.3 and
# v1.37.2) are built first (make real-binaries: about 11 minutes per
# Kubernetes version from a cold build cache); the kubelets (about 4
# minutes each from a cold build cache) and the images are built by the
# test. Everything is cached under $STRATUM_CACHE (default
# ~/.cache/stratum-upgrade), so a rerun does not rebuild it.
#
# With the argument "bench" (make bench-kubelet) it runs only
# TestReleaseStrategies instead: kubelet's release of a static pod's name
# and each replacement strategy, measured and written into
# docs/performance.md (STRATUM_BENCH_N rounds per strategy, default 10;
# STRATUM_BENCH_STRATEGIES picks some, e.g. cde; STRATUM_BENCH_LOAD=n runs
# n busy loops meanwhile), under each kubelet (or KUBELET's). It needs no
# real control plane, so the real binaries are not built.
set -euo pipefail
mode=${1:-e2e}
case $mode in
e2e) tests='TestKubeletBinary|TestKubeletRules|TestHostRunsStaticPod|TestRealKubelet|TestRegistryImages|TestForeignEtcdUnderRealKubelet' ;;
bench) tests='^TestReleaseStrategies$'; export STRATUM_BENCH_KUBELET=1 ;;
*) echo "usage: $0 [e2e|bench]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
	echo "e2e-kubelet: must run as root (containerd, runc and kubelet need it)" >&2
	exit 1
fi
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v containerd-shim-runc-v2 >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
	echo "e2e-kubelet: installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
containerd --version
runc --version | head -1
echo "e2e-kubelet: kubelets ${KUBELET:-every one (e2e/kubelets.go)}"
start=$(date +%s)
if [ "$mode" = e2e ]; then
	# The real-control-plane scenarios run these binaries; built here, outside
	# the test's timeout (buildbins prints each build's time, 0 when cached).
	go run ./internal/harness/cmd/buildbins -kubeadm=false
	echo "e2e-kubelet: real binaries ready after $(( $(date +%s) - start ))s"
fi
log=$(mktemp /tmp/e2e-kubelet-XXXXXX.log)
if ! STRATUM_E2E=1 go test -count=1 -v -timeout 60m -run "$tests" ./e2e/ 2>&1 | tee "$log"; then
	# A failure's own lines are easily buried under the containerd and
	# container logs the tests print after it: repeat each failed test's
	# lines last, without those logs, so the tail of CI's output says why.
	echo
	grep -oE '(surge|stop-then-start|surge rollback): requests failed .*|surge memory: control plane .*' "$log" | awk '!seen[$0]++' || true
	echo "e2e-kubelet: FAILED; each failed test's own lines (full log: $log):"
	for t in $(sed -n 's/^ *--- FAIL: \([^ ]*\) .*/\1/p' "$log"); do
		echo "=== $t"
		awk -v t="$t" '
			$0 ~ "^=== (RUN|NAME|CONT) +" { on = ($NF == t); next }
			$0 ~ "^ *--- (PASS|FAIL|SKIP)" { on = 0; next }
			on && $0 !~ /time="|level=|^ *=== kubelet stand-in/ { print }
		' "$log" | tail -60
	done
	exit 1
fi
if [ "$mode" = e2e ]; then
	# Issue 41's figure lines (e2e/surge_test.go), side by side, last.
	echo "e2e-kubelet: surge figures (load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; full log: $log)"
	grep -oE '(surge|stop-then-start|surge rollback): requests failed .*|surge memory: control plane .*' "$log" | awk '!seen[$0]++' || echo "e2e-kubelet: no surge figure line"
fi
echo "e2e-kubelet ($mode): passed in $(( $(date +%s) - start ))s"
