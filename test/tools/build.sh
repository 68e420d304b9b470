#!/usr/bin/env bash
# build.sh builds the upstream binaries the end-to-end harness runs (etcd and
# kube-apiserver) from the tool modules next to this script, into a cache dir:
# $HPMOUNT_TOOLS_DIR, default $HOME/.cache/hpmount/bin.
#
# A binary is rebuilt only when it is missing or when its module's go.mod,
# go.sum or main.go changed: the sha256 of those files is kept in
# <binary>.stamp next to the binary. Safe to run concurrently (flock).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${HPMOUNT_TOOLS_DIR:-$HOME/.cache/hpmount/bin}
mkdir -p "$out"

if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.build.lock"
	if ! flock -n 9; then
		echo "tools: another build holds $out/.build.lock; waiting"
		flock 9
	fi
fi

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
	tools=(etcd kube-apiserver)
fi

for tool in "${tools[@]}"; do
	src=$here/$tool
	if [[ ! -f $src/go.mod ]]; then
		echo "tools: no module for $tool at $src" >&2
		exit 1
	fi
	bin=$out/$tool
	want=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -d' ' -f1)
	have=$(cat "$bin.stamp" 2>/dev/null || true)
	if [[ -x $bin && $have == "$want" ]]; then
		echo "tools: $tool is up to date ($bin)"
		continue
	fi
	if [[ -x $bin ]]; then
		echo "tools: $tool: module changed or no stamp; rebuilding $bin"
	else
		echo "tools: $tool: building $bin (kube-apiserver takes minutes on a cold cache)"
	fi
	start=$SECONDS
	# Build next to the target and rename, so a reader never sees half a binary.
	(cd "$src" && GOWORK=off go build -o "$bin.tmp.$$" .)
	mv -f "$bin.tmp.$$" "$bin"
	echo "$want" >"$bin.stamp"
	echo "tools: $tool built in $((SECONDS - start))s"
done
