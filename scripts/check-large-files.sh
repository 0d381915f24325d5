#!/usr/bin/env bash
# check-large-files.sh [REPO]: fails, naming each one, when a file tracked
# in REPO's index (default: the current directory) is over 1 MiB and not
# under a testdata/ directory, where generated fixtures live. It keeps a
# build output committed by mistake (a 41.8 MB binary named dist once)
# out of the tree: make lint runs it.
set -euo pipefail
limit=$((1024 * 1024))
cd "${1:-.}"
found=$(
	git ls-files -s -z |
		while IFS= read -r -d '' entry; do
			meta=${entry%%$'\t'*}
			read -r _ object _ <<<"$meta"
			printf '%s %s\n' "$object" "${entry#*$'\t'}"
		done |
		git cat-file --batch-check='%(objectsize) %(rest)' |
		while read -r size path; do
			[[ $size =~ ^[0-9]+$ ]] && ((size > limit)) || continue
			[[ /$path == */testdata/* ]] && continue
			printf '  %s (%d bytes)\n' "$path" "$size"
		done
)
if [[ -n $found ]]; then
	echo "tracked files over 1 MiB outside testdata/ (a build output committed by mistake? git rm --cached it; generated fixtures go under testdata/):"
	echo "$found"
	exit 1
fi
