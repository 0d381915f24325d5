#!/bin/sh
# After removal: systemd forgets the unit files that went with the package.
set -e
if command -v systemctl >/dev/null 2>&1; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
