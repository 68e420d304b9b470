#!/usr/bin/env bash
# Copyright The hpmount Authors.
# SPDX-License-Identifier: Apache-2.0

# Fuzzes each target of the Makefile's FUZZ_TARGETS (package:Target:execs).
#
#   fuzz.sh --count TARGET...        each target for its own execution count
#                                    (-fuzztime Nx): make test's fuzz step
#   fuzz.sh --time DURATION TARGET...  each target for DURATION: make fuzz
#
# Why two modes: with a duration, Go's fuzz coordinator (before Go 1.27,
# golang/go#75804) can fail a target with a bare "context deadline exceeded"
# at the end of its budget when the deadline wins a race against its own
# shutdown; no input failed, and nothing is written. An execution count sets
# a limit instead of a deadline, so make test cannot be refused by that
# race, and every target explores the same amount on a fast or a loaded
# machine. A time budget is kept for long runs (make fuzz); there a bare
# deadline with no new failing input is a warning.
#
# A run fails when a failing input is written to
# <package>/testdata/fuzz/<Target>/, or when go test fails for any other
# reason (a seed corpus entry failing, a build error).
set -uo pipefail

usage() { echo "usage: $0 --count TARGET... | --time DURATION TARGET..." >&2; exit 2; }

mode=${1:-}; shift || usage
case $mode in
--count) ;;
--time) duration=${1:-}; shift || usage; [[ -n $duration ]] || usage ;;
*) usage ;;
esac
[[ $# -gt 0 ]] || usage

GO=${GO:-go}
warnings=()
failed=()
begin=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# bare_deadline tells the coordinator's shutdown race from a finding: the
# target's only failure is the line "context deadline exceeded", and no
# input was reported failing.
bare_deadline() {
	[[ $(grep -cE '^[[:space:]]*context deadline exceeded$' <<<"$1") -eq 1 ]] &&
		! grep -qE 'Failing input written to|failure while testing seed corpus|panic:' <<<"$1"
}

# corpus lists the failing inputs of a target's testdata corpus.
corpus() { ls -1 "$1" 2>/dev/null | sort; }

for spec in "$@"; do
	IFS=: read -r pkg target execs <<<"$spec"
	[[ -n $pkg && -n $target ]] || { echo "fuzz: bad target $spec (want package:Target[:execs])" >&2; exit 2; }
	if [[ $mode == --count ]]; then
		[[ $execs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: $spec has no execution count" >&2; exit 2; }
		budget=${execs}x
	else
		budget=$duration
	fi
	dir="$pkg/testdata/fuzz/$target"
	before=$(corpus "$dir")
	start=$SECONDS
	"$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$budget" "$pkg" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	out=$(<"$log")
	new=$(comm -13 <(printf '%s\n' "$before") <(corpus "$dir") | sed '/^$/d')
	took=$((SECONDS - start))
	if [[ -n $new ]]; then
		failed+=("$target: failing input written to $dir/$(head -1 <<<"$new")")
	elif [[ $rc -eq 0 ]]; then
		echo "fuzz: $target: $budget in ${took}s, $(grep -o 'execs: [0-9]*' <<<"$out" | tail -1)"
	elif [[ $mode == --time ]] && bare_deadline "$out"; then
		warnings+=("$target: bare \"context deadline exceeded\" at the end of $budget and no failing input written (golang/go#75804)")
	else
		failed+=("$target: go test exited $rc (see above)")
	fi
done

echo "fuzz: $# targets in $((SECONDS - begin))s"
for w in "${warnings[@]}"; do echo "fuzz: WARNING $w"; done
if [[ ${#failed[@]} -gt 0 ]]; then
	for f in "${failed[@]}"; do echo "fuzz: FAIL $f"; done
	exit 1
fi
