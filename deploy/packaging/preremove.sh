#!/bin/sh
# Before the package is removed (not upgraded): disable the boot units.
# Debian passes "remove" (or "upgrade"), rpm the count of versions left
# ("0" on removal). The state directory /var/lib/stratum (the journal, the
# snapshots) is not the package's and stays.
set -e
case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if command -v systemctl >/dev/null 2>&1; then
	systemctl disable stratum-upgrade-prepare.service stratum-upgrade-resume.service || true
fi
