#!/usr/bin/env bash
# make dist-check: install this machine's .deb of make dist with dpkg, as
# an operator would, and check what it installed: the binary runs
# (version, --help, status with the packaged example config), the boot
# units are in place and enabled, and systemd-analyze verify accepts them
# when systemd-analyze is there; then remove and purge it, and check that
# it took its files and left /var/lib/stratum. Root (dpkg); CI runs it on
# its own machine. It refuses to run where stratum-upgrade is installed
# already, and removes what it installed on any exit.
set -euo pipefail
dist=${1:-dist}
[ "$(id -u)" = 0 ] || { echo "dist-check: needs root (dpkg -i)" >&2; exit 1; }
arch=$(dpkg --print-architecture)
debs=("$dist"/stratum-upgrade_*_"$arch".deb)
[ -f "${debs[0]}" ] || { echo "dist-check: no $arch .deb in $dist (make dist)" >&2; exit 1; }
if dpkg -s stratum-upgrade >/dev/null 2>&1; then
	echo "dist-check: stratum-upgrade is installed on this machine already; not touching it" >&2
	exit 1
fi
fail() { echo "dist-check: $*" >&2; exit 1; }

# /var/lib/stratum with a file in it must survive removal and purge.
made_state=
if [ ! -e /var/lib/stratum ]; then
	mkdir -p /var/lib/stratum && made_state=1
fi
marker=/var/lib/stratum/dist-check.$$
echo kept >"$marker"
tmp=$(mktemp -d)
cleanup() {
	dpkg --purge stratum-upgrade >/dev/null 2>&1 || true
	rm -f "$marker"
	[ -z "$made_state" ] || rmdir /var/lib/stratum 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "dist-check: dpkg -i ${debs[0]}"
dpkg -i "${debs[0]}"
/usr/bin/stratum-upgrade version | tee "$tmp/version"
if ! grep -q '^commit: [0-9a-f]\{40\}' "$tmp/version"; then
	# go build stamps no commit in a git worktree (only in a clone, as CI's).
	[ "$(git rev-parse --git-dir)" != "$(git rev-parse --git-common-dir)" ] || fail "version names no commit"
	echo "dist-check: warning: no commit in version: built in a git worktree, which go build does not stamp" >&2
fi
/usr/bin/stratum-upgrade --help >/dev/null || fail "--help failed"
# status reads the installed /etc/stratum/upgrade.yaml (all comments).
/usr/bin/stratum-upgrade status --state-dir "$tmp/state" >/dev/null || fail "status with the packaged config failed"
for f in /usr/lib/systemd/system/stratum-upgrade-prepare.service /usr/lib/systemd/system/stratum-upgrade-resume.service \
	/usr/share/man/man1/stratum-upgrade.1.gz /usr/share/man/man1/stratum-upgrade-run.1.gz \
	/usr/share/bash-completion/completions/stratum-upgrade /etc/stratum/upgrade.yaml; do
	[ -f "$f" ] || fail "$f not installed"
done
grep -q '^ExecStart=/usr/bin/stratum-upgrade ' /usr/lib/systemd/system/stratum-upgrade-resume.service || fail "the resume unit does not run /usr/bin/stratum-upgrade"
# Enabled on install: systemctl enable made the [Install] symlinks.
for l in /etc/systemd/system/kubelet.service.wants/stratum-upgrade-prepare.service \
	/etc/systemd/system/multi-user.target.wants/stratum-upgrade-resume.service; do
	[ -L "$l" ] || fail "$l: the unit was not enabled on install"
done
if command -v systemd-analyze >/dev/null; then
	# kubelet.service is not on this machine: verify warns about it only.
	systemd-analyze verify /usr/lib/systemd/system/stratum-upgrade-*.service 2>&1 | grep -v 'kubelet.service' | tee "$tmp/verify" || true
	[ ! -s "$tmp/verify" ] || fail "systemd-analyze verify: see above"
	echo "dist-check: systemd-analyze verify: the units are valid"
fi

dpkg -r stratum-upgrade
[ ! -e /usr/bin/stratum-upgrade ] || fail "dpkg -r left /usr/bin/stratum-upgrade"
[ ! -e /etc/systemd/system/multi-user.target.wants/stratum-upgrade-resume.service ] || fail "dpkg -r left the resume unit enabled"
dpkg --purge stratum-upgrade
[ ! -e /etc/stratum/upgrade.yaml ] || fail "dpkg --purge left /etc/stratum/upgrade.yaml"
[ -f "$marker" ] || fail "removing the package removed /var/lib/stratum"
echo "dist-check: ${debs[0]##*/} installed, checked and removed; /var/lib/stratum kept"
