#!/bin/sh
# After the package is installed or upgraded: enable the two boot units as
# a distribution package does (they run at the next boot; nothing is started
# now: resume --prepare belongs before kubelet, resume after it). On a
# machine without systemd there is nothing to enable.
set -e
if command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	systemctl enable stratum-upgrade-prepare.service stratum-upgrade-resume.service
fi
