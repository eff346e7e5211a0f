#!/usr/bin/env bash
# Runs the Windows test binaries of the root module's packages under Wine
# (Debian bookworm's Wine 8.0), so that what the README says of Windows is
# run, not only compiled. Needs: wine, gcc-mingw-w64-x86-64 (installed with
# apt-get when missing and running as root). Run it before each release
# (.ci/run runs it with WINDOWS_WINE=1). On 2 shared cores, once the
# packages are installed: the root package 15-22 min and the others 4 min
# at load average 24; a few minutes on a quiet machine.
#
# Two workarounds let a Go program start and clean up under Wine 8.0; both
# are for Wine, not for bloomkv, and change nothing on real Windows:
#  1. Go's runtime calls ProcessPrng from bcryptprimitives.dll, which Wine 8
#     lacks: a shim DLL exports it on top of RtlGenRandom. Go loads it from
#     system32 only, so it goes into the Wine prefix's system32.
#  2. Wine 8 answers FileDispositionInformationEx with STATUS_NOT_IMPLEMENTED,
#     which Go's os.RemoveAll does not take as "fall back", so t.TempDir's
#     cleanup fails. A build overlay adds that status to the fallback case in
#     a copy of the installed Go's internal/syscall/windows/at_windows.go.
#
# Usage: .ci/windows-wine.sh [package ...]   (default: every package of the
# root module that has tests, but cmd/kvbench; WINE_TEST_FLAGS adds test
# flags, e.g.
# WINE_TEST_FLAGS='-test.run TestX' .ci/windows-wine.sh .)
# Prints per package the pass/skip/fail counts and each skip's reason;
# exits non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wine >/dev/null || ! command -v x86_64-w64-mingw32-gcc >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends wine wine64 gcc-mingw-w64-x86-64
	else
		echo "windows-wine: needs wine and gcc-mingw-w64-x86-64" >&2
		exit 1
	fi
fi

work=$(mktemp -d)
trap 'wineserver -k 2>/dev/null; wineserver -w 2>/dev/null; rm -rf "$work"' EXIT
export WINEPREFIX="$work/prefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="

# 1. The ProcessPrng shim.
cat >"$work/shim.c" <<'C'
#include <windows.h>
BOOLEAN WINAPI SystemFunction036(PVOID RandomBuffer, ULONG RandomBufferLength);
BOOL WINAPI ProcessPrng(PBYTE pbData, SIZE_T cbData) {
	while (cbData > 0) {
		ULONG n = cbData > 0x40000000 ? 0x40000000 : (ULONG)cbData;
		if (!SystemFunction036(pbData, n)) return FALSE;
		pbData += n; cbData -= n;
	}
	return TRUE;
}
C
printf 'LIBRARY bcryptprimitives.dll\nEXPORTS\nProcessPrng\n' >"$work/shim.def"
x86_64-w64-mingw32-gcc -O2 -shared -s -o "$work/bcryptprimitives.dll" "$work/shim.c" "$work/shim.def" -ladvapi32
wineboot --init >/dev/null 2>&1 || true
wineserver -w || true
cp "$work/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"

# 2. The os.RemoveAll overlay, made from the installed Go's own file.
src="$(go env GOROOT)/src/internal/syscall/windows/at_windows.go"
grep -q 'STATUS_NOT_SUPPORTED' "$src" || { echo "windows-wine: $src changed; update the overlay" >&2; exit 1; }
sed "s/^\(\t*\)STATUS_NOT_SUPPORTED: /\1STATUS_NOT_SUPPORTED, NTStatus(0xC0000002): /" "$src" >"$work/at_windows.go"
grep -q 'NTStatus(0xC0000002)' "$work/at_windows.go" || { echo "windows-wine: overlay did not apply to $src" >&2; exit 1; }
printf '{"Replace": {"%s": "%s"}}\n' "$src" "$work/at_windows.go" >"$work/overlay.json"

# -test.v gives one "--- PASS/SKIP/FAIL" line per test to count; a skip
# prints its reason.
pkgs=("$@")
# By default every package of the root module that has tests but kvbench,
# a benchmark for Linux: its tests check /proc/self/io accounting and
# sub-millisecond timings, which Wine's clock and /proc do not give.
[ ${#pkgs[@]} -gt 0 ] || mapfile -t pkgs < <(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v '/cmd/kvbench$')
total_pass=0 total_skip=0 total_fail=0 failed=()
for pkg in "${pkgs[@]}"; do
	name=$(basename "$pkg")
	dir="$work/run/$name"
	mkdir -p "$dir"
	start=$(date +%s)
	GOOS=windows GOARCH=amd64 go test -overlay "$work/overlay.json" -c -o "$dir/$name.test.exe" "$pkg"
	status=0
	# In the package's directory, as go test runs it: tests read testdata/.
	(cd "$(go list -f '{{.Dir}}' "$pkg")" && wine "$dir/$name.test.exe" -test.v ${WINE_TEST_FLAGS:-}) >"$dir/out.txt" 2>&1 || status=$?
	pass=$(grep -c -E '^\s*--- PASS' "$dir/out.txt" || true)
	skip=$(grep -c -E '^\s*--- SKIP' "$dir/out.txt" || true)
	fail=$(grep -c -E '^\s*--- FAIL' "$dir/out.txt" || true)
	echo "windows-wine: $pkg: $pass passed, $skip skipped, $fail failed (tests and subtests), exit $status, $(($(date +%s) - start)) s"
	# Every skip with its reason, every failure with what it printed.
	grep -B2 -E '^\s*--- SKIP' "$dir/out.txt" | grep -E '_test\.go:[0-9]+:' | sed 's/^/  skip: /' || true
	if [ "$status" != 0 ]; then
		# Everything but the passing tests' lines: the failures' logs.
		grep -v -E '^\s*(=== (RUN|PAUSE|CONT)|--- PASS)' "$dir/out.txt" | sed 's/^/  /' | tail -200
		failed+=("$pkg")
	fi
	total_pass=$((total_pass + pass)) total_skip=$((total_skip + skip)) total_fail=$((total_fail + fail))
done
wineserver -k || true
echo "windows-wine: total: $total_pass passed, $total_skip skipped, $total_fail failed in ${#pkgs[@]} packages"
if [ ${#failed[@]} -gt 0 ]; then
	echo "windows-wine: failed: ${failed[*]}"
	exit 1
fi
