#!/usr/bin/env bash
# Builds, on a machine with Go and the module cache reachable, the binaries
# that run.sh runs on a many-core machine that has neither: the root
# package's and the raft store's test binaries under the race detector, the
# root's without it, and enginebench. All are linked statically, so they
# run on any x86-64 Linux whatever its C library; all are stripped and
# gzipped, so that they travel small.
#
#   bench/manycore/build.sh [DIR]     # default: .manycore at the repo root
#
# The race detector needs cgo; its binaries are linked statically by the
# external linker (netgo and osusergo keep the C resolver and user lookup
# out).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/.manycore}
mkdir -p "$out"
out=$(cd "$out" && pwd)
static=(-trimpath -tags netgo,osusergo -ldflags '-s -w -linkmode=external -extldflags=-static')

(cd "$root" && go test -c -race "${static[@]}" -o "$out/root-race.test" .)
(cd "$root" && CGO_ENABLED=0 go test -c -trimpath -ldflags '-s -w' -o "$out/root.test" .)
(cd "$root/contrib/raftstore" && go test -c -race "${static[@]}" -o "$out/raftstore-race.test" .)
(cd "$root/bench" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/enginebench" ./cmd/enginebench)
for f in root-race.test root.test raftstore-race.test enginebench; do
	gzip -f -6 "$out/$f"
done
git -C "$root" rev-parse HEAD >"$out/commit"
ls -l "$out"
