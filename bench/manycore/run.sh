#!/usr/bin/env bash
# Runs, on a many-core Linux machine without Go, the checks and benchmarks
# whose results depend on the core count, from the binaries build.sh made:
#
#   bench/manycore/run.sh BINDIR OUTDIR first    # what needs the cores most, by need: ~9.5 min
#   bench/manycore/run.sh BINDIR OUTDIR rest     # everything else
#
# or by kind (tests, reads, writes: the same steps as first and rest
# together, grouped otherwise):
#
#   bench/manycore/run.sh BINDIR OUTDIR tests    # concurrency tests at -cpu 1,4,16
#   bench/manycore/run.sh BINDIR OUTDIR reads    # Gets at 1, 4, 16 readers; scans; every engine
#   bench/manycore/run.sh BINDIR OUTDIR writes   # synced writers to 64, fill latency, cold reads
#
# Run it from the repository root (the tests read testdata/). Each part
# keeps to a time budget (BUDGET seconds; by default 570 for first, 290
# for tests and for writes, 480 for reads and rest): every step has a
# timeout of its own, and a step that would start after the budget is
# spent is skipped and said so, so that a part always ends with what it
# has. OUTDIR gets a log per step and summary-PART.txt: the machine
# (cores, CPU, memory, kernel, file system), each step's exit status and
# time, the tests' counts and the tables.
set -uo pipefail
bin=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
part=$3
# The steps of each part, in the order they run. first holds, most needed
# first, the columns only a many-core machine gives and what explains the
# ones still short: readers' scaling with the machine's own bound for it
# and a profile, synced writers to 64 with the wait for writers swept and
# profiled, the concurrency tests under the race detector at -cpu 1,4,16,
# then every engine's readers table and the fill beside its flushes and
# merges (measured on 16 cores before: last, where a short budget drops
# them).
case $part in
first) steps=(readers-bloomkv read-profile sync-gather sync-profile sync-rounds concurrency-race sync-scaling get-100B fill-latency) budget=${BUDGET:-570} ;;
rest) steps=(raft-cluster-race concurrency-full get-4KiB cold) budget=${BUDGET:-480} ;;
tests) steps=(concurrency-race raft-cluster-race concurrency-full) budget=${BUDGET:-290} ;;
reads) steps=(get-100B readers-bloomkv read-profile get-4KiB) budget=${BUDGET:-480} ;;
writes) steps=(sync-scaling sync-rounds sync-gather sync-profile fill-latency cold) budget=${BUDGET:-290} ;;
*)
	echo "run.sh: the part is first, rest, tests, reads or writes, not $part" >&2
	exit 2
	;;
esac
start=$SECONDS
repo=$(pwd)
scratch=${TMPDIR:-/tmp}/bloomkv-manycore
rm -rf "$scratch" && mkdir -p "$scratch"
summary=$out/summary-$part.txt

for f in "$bin"/*.gz; do
	[ -e "$f" ] || continue
	gunzip -c "$f" >"$scratch/$(basename "$f" .gz)"
	chmod +x "$scratch/$(basename "$f" .gz)"
done
export PATH=$scratch:$PATH

{
	echo "commit: $(cat "$bin/commit" 2>/dev/null)"
	echo "date: $(date -u +%FT%TZ)"
	echo "cores: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo
	command -v lscpu >/dev/null && lscpu | grep -E '^(Thread|Core|Socket)|^L[23] cache'
	grep MemTotal /proc/meminfo
	echo "kernel: $(uname -r)"
	echo "file system of $scratch: $(df -T "$scratch" | awk 'NR==2 {print $2}')"
	echo "load: $(cat /proc/loadavg)"
	echo
} >"$summary"

# step NAME SECONDS DIR CMD...: runs CMD in DIR with a timeout of SECONDS
# (less if the budget has less left), logging to OUTDIR/NAME.log, and
# notes its status and time in the summary. STEPS, a regular expression,
# runs only the steps whose names match it (for a rerun of one).
step() {
	local name=$1 limit=$2 dir=$3
	shift 3
	[[ $name =~ ${STEPS:-.} ]] || return 0
	local left=$((budget - (SECONDS - start)))
	if [ "$left" -lt 20 ]; then
		echo "$name: skipped, ${left}s of the budget left" | tee -a "$summary"
		return
	fi
	[ "$limit" -gt "$left" ] && limit=$left
	local t0=$SECONDS
	(cd "$dir" && timeout --kill-after=5 "$limit" "$@") >"$out/$name.log" 2>&1
	local rc=$?
	local verdict="ok"
	[ $rc -ne 0 ] && verdict="FAILED (exit $rc)"
	[ $rc -eq 124 ] || [ $rc -eq 137 ] && verdict="TIMED OUT at ${limit}s"
	echo "$name: $verdict in $((SECONDS - t0))s" | tee -a "$summary"
}

# The tests that CI runs at -cpu 1,4,16 on two cores, here on many.
concurrency='^(TestStress|TestCrashLoop|TestCheckpointUnderLoad|TestRaftLogModel|TestReopenWhileTornDown|TestGetCopiesBeforeRelease|TestReadStatePins|TestPipelinedCommit|TestRotationDoesNotWaitForOldWALSync|TestRotationWaitsForSpareInFlight|TestObsoleteWALNotSynced|TestUrgentMergesBesideHeldMerge|TestSyncedWritesFailWithFsync|TestPowerLoss|TestRetryFlush|TestRetryCompaction|TestRetryPersistentFault|TestRetryWALCreation)$'

# SCALE divides every key and op count, for a quick try of the script
# itself on a small machine.
s=${SCALE:-1}
eb=(enginebench -dir "$scratch")

# run_step NAME runs the step called NAME. Times noted are from the
# project's 2-core machine (2026-11-28).
run_step() {
	case $1 in
	concurrency-race) # about 100 s (99 s in a try of first, 2026-11-28)
		step concurrency-race 130 "$repo" root-race.test -test.v -test.short -test.cpu 1,4,16 -test.count 1 \
			-stress.ops 1000 -test.run "$concurrency" -test.timeout 10m
		;;
	raft-cluster-race) # 35 s
		step raft-cluster-race 50 "$repo/contrib/raftstore" raftstore-race.test -test.v -test.short \
			-test.cpu 1,4,16 -test.run '^(TestCluster|TestCrash)$' -test.timeout 10m
		;;
	concurrency-full) # full forms without the detector: many more kills, cuts and steps; about 100 s
		step concurrency-full 120 "$repo" root.test -test.v -test.cpu 16,4,1 -test.count 1 \
			-test.run '^(TestCrashLoop|TestPowerLoss|TestRaftLogModel|TestStress)$' \
			-crashloop.iterations 200 -powerloss.cuts 60 -test.timeout 10m
		;;
	get-100B) # 10^6 keys of 100 bytes, 2*10^5 Gets per phase and reader count; about 2.5 min
		step get-100B 210 "$repo" "${eb[@]}" -all -n $((1000000 / s)) -ops $((200000 / s)) -readers 1,4,16
		;;
	get-4KiB) # 2*10^5 keys of 4 KiB; about 4 min, the fills mostly system time
		step get-4KiB 260 "$repo" "${eb[@]}" -all -n $((200000 / s)) -value-size 4096 -ops $((200000 / s)) -readers 1,4,16
		;;
	readers-bloomkv) # bloomkv alone, 4*10^6 lookups per phase, twice: the readers' scaling with less noise; about 35 s
		step readers-bloomkv 60 "$repo" bash -c 'for i in 1 2; do "$@"; done' - "${eb[@]}" -engine bloomkv \
			-n $((1000000 / s)) -ops $((4000000 / s)) -readers 1,4,16
		;;
	sync-scaling) # about 25 s
		step sync-scaling 70 "$repo" "${eb[@]}" -all -sync-scaling -sync-writers 1,4,16,64 -sync-duration 1s -sync-ops $((40000 / s))
		;;
	sync-rounds) # three more rounds of bloomkv against Pebble, whose ratio moves between rounds; about 65 s
		step sync-rounds 90 "$repo" bash -c 'for i in 1 2 3; do "$@" | grep -E "^\| (engine|bloomkv|pebble) "; done' - \
			"${eb[@]}" -all -sync-scaling -sync-writers 1,4,16,64 -sync-duration 1s -sync-ops $((40000 / s))
		;;
	sync-gather) # 16 and 64 synced writers on 16 Ps with the wait for returning writers at 1 (the default), 0.5 and 0 fsyncs long (-bench.gather -1), alternating, twice: what the wait buys or costs on this machine, with each fsync cycle's fsync and wait times; about 30 s
		step sync-gather 60 "$repo" bash -c 'for i in 1 2; do for g in 1 0.5 -1; do echo "gather=$g"; "$@" -bench.gather=$g | grep ^Benchmark; done; done' - \
			root.test -test.run '^$' -test.cpu 16 -test.bench 'BenchmarkPutSyncWriters/writers=(16|64)$' -test.benchtime 1s
		;;
	read-profile) # absent-key Gets and the machine's ceiling for their filter work (nothing shared) at -cpu 1,4,16, three counts, then a CPU profile of the Gets at 16 (read-16.prof); about 60 s
		step read-profile 100 "$repo" bash -c '"$@" -test.bench "BenchmarkGetParallel/(miss|ceiling)" -test.cpu 1,4,16 -test.count 3 &&
			"$@" -test.bench "BenchmarkGetParallel/miss" -test.cpu 16 -test.cpuprofile "$0"' \
			"$out/read-16.prof" root.test -test.run '^$' -test.benchtime 2s
		;;
	sync-profile) # 16 and 64 synced writers on 16 Ps, the device's own fsync, with a CPU profile (sync.prof), then 30,000 Puts of 64 writers traced (sync-64.trace); about 30 s
		step sync-profile 60 "$repo" bash -c '"$@" -test.bench "BenchmarkPutSyncWriters/writers=(16|64)$" -test.benchtime 3s -test.cpuprofile "$0/sync.prof" &&
			"$@" -test.bench "BenchmarkPutSyncWriters/writers=64$" -test.benchtime 30000x -test.trace "$0/sync-64.trace"' \
			"$out" root.test -test.run '^$' -test.cpu 16
		;;
	fill-latency) # about 2 min
		step fill-latency 150 "$repo" "${eb[@]}" -all -fill-latency -n $((2000000 / s))
		;;
	cold) # about 75 s
		step cold 100 "$repo" "${eb[@]}" -all -cold -n $((1000000 / s)) -cold-ops $((5000 / s))
		;;
	esac
}

for name in "${steps[@]}"; do
	run_step "$name"
done

# The summary: the tests' counts and failures, then every table.
for name in "${steps[@]}"; do
	f=$out/$name.log
	[ -f "$f" ] || continue
	case $name in
	concurrency-* | raft-*)
		echo "$name: $(grep -c -- '--- PASS' "$f") passed, $(grep -c -- '--- FAIL' "$f") failed"
		grep -E -- '--- FAIL|^panic|WARNING: DATA RACE' "$f"
		;;
	esac
done >>"$summary"
for name in "${steps[@]}"; do
	f=$out/$name.log
	[ -f "$f" ] || continue
	case $name in
	concurrency-* | raft-*) ;;
	readers-bloomkv)
		echo
		echo "== $name (get-hit and get-miss ops/s at 1, 4, 16 readers; one line a run)"
		grep -o '"readers":\[[^]]*\]' "$f"
		;;
	*)
		echo
		echo "== $name"
		grep -v -E '^(\{|running )' "$f"
		;;
	esac
done >>"$summary"
rm -rf "$scratch"
echo "total: $((SECONDS - start))s" >>"$summary"
cat "$summary"
