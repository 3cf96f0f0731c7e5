#!/usr/bin/env bash
# make fuzz: runs every libFuzzer target of tests/fuzz/ (built by the `fuzz` preset) for
# FUZZ_SECONDS each, one after the other (a run is single-core), docs/testing.md.
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]     targets: hbone_server, svid, ...
# New interesting inputs go to BUILD_DIR/fuzz-work/<target>/ (the committed seeds in
# tests/fuzz/<target>_corpus/ are only read); a crash is written to
# BUILD_DIR/fuzz-crashes/<target>/ and fails the run: minimise it, fix the code, and commit
# the input as tests/fuzz/<target>_corpus/crash_<what> (it then replays in `make test`).
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: $0 BUILD_DIR SECONDS [TARGET...]}
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for corpus in "$src"/tests/fuzz/*_corpus; do
    name=$(basename "$corpus")
    targets+=("${name%_corpus}")
  done
fi

# Longest input per target: whole HTTP/2 conversations and certificate chains need more
# than libFuzzer's default (the largest seed).
max_len() {
  case "$1" in
    hbone_server) echo 32768 ;;
    svid) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

failed=()
printf '%-16s %8s %12s %8s %8s %s\n' target seconds executions cov ft result
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/${t}_fuzzer"
  [ -x "$bin" ] || { echo "fuzz: $bin not built (cmake --build --preset fuzz)" >&2; exit 1; }
  work="$build/fuzz-work/$t"
  crashes="$build/fuzz-crashes/$t"
  log="$build/fuzz-logs/$t.log"
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  rc=0
  "$bin" -max_total_time="$seconds" -max_len="$(max_len "$t")" -print_final_stats=1 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
    "$work" "$src/tests/fuzz/${t}_corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (rc $rc): see $log, input in $crashes/"
    failed+=("$t")
  fi
  printf '%-16s %8s %12s %8s %8s %s\n' "$t" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
