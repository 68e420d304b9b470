#!/usr/bin/env bash
# Copyright The hpmount Authors.
# SPDX-License-Identifier: Apache-2.0

# build.sh builds the upstream binaries the end-to-end harness runs (etcd,
# kube-apiserver, and the real node's kubelet) from the tool modules next to
# this script, into a cache dir: $HPMOUNT_TOOLS_DIR, default
# $HOME/.cache/hpmount/bin.
#
# A binary is rebuilt only when it is missing or when its module's go.mod,
# go.sum or main.go, or its version flags, changed: the sha256 of those is
# kept in <binary>.stamp next to the binary. The kubelet and kube-apiserver
# get their version stamped from k8s.io/kubernetes in go.mod, as a release
# build does: unstamped they report v0.0.0-master, which the API server's
# version skew checks and helm's kubeVersion check read as nonsense. Safe to run concurrently (flock).
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

# version_flags stamps the kubelet with the k8s.io/kubernetes version its
# module requires: without it the node reports v0.0.0-master. The API
# server is left as it was built (no client of it reads its version), so a
# warm cache does not rebuild it.
version_flags() {
	local v major minor
	[[ $2 == kubelet || $2 == kube-apiserver ]] || return 0
	v=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$1")
	[[ $v =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "tools: no k8s.io/kubernetes version in $1" >&2; exit 1; }
	major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
	local pkg=k8s.io/component-base/version
	echo "-X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
}

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
	tools=(etcd kube-apiserver kubelet)
fi

for tool in "${tools[@]}"; do
	src=$here/$tool
	if [[ ! -f $src/go.mod ]]; then
		echo "tools: no module for $tool at $src" >&2
		exit 1
	fi
	bin=$out/$tool
	flags=$(version_flags "$src/go.mod" "$tool")
	want=$({ cat "$src/go.mod" "$src/go.sum" "$src/main.go"; [[ -z $flags ]] || echo "$flags"; } | sha256sum | cut -d' ' -f1)
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
	# Without the Makefile's CGO_ENABLED and GOFLAGS (the flavour of this
	# module's builds): the stamp does not record them, so a cached tool and
	# a fresh one must come from the same build.
	(cd "$src" && env -u CGO_ENABLED -u GOFLAGS GOWORK=off go build -ldflags "$flags" -o "$bin.tmp.$$" .)
	mv -f "$bin.tmp.$$" "$bin"
	echo "$want" >"$bin.stamp"
	echo "tools: $tool built in $((SECONDS - start))s"
done
