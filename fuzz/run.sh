#!/usr/bin/env bash
# Builds the fuzz targets and runs each for a bounded time; exits non-zero if any found a
# crash (a panic, an assertion, a sanitizer error, a timeout or running out of memory).
#
#   bash fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 20 s, every target)
#
# FUZZ_JOBS (default 2) targets run at once, one core each. Each target starts from its
# seed corpus (fuzz/seeds/TARGET, kept in the repository) and from what earlier runs found
# (fuzz/corpus/TARGET, not kept); new inputs go to the latter. A crashing input is written
# to fuzz/artifacts/TARGET/. Needs the nightly toolchain and cargo-fuzz (`cargo install
# cargo-fuzz`). Prints one line per target: executions, then libFuzzer's last counters
# (cov: code edges reached, ft: features, corp: corpus entries/bytes).
set -euo pipefail

# All in one function, read whole before it runs (the script may be edited meanwhile).
main() {
  cd "$(dirname "$0")"
  secs=${1:-20}
  shift || true
  targets=("$@")
  if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
  fi
  jobs=${FUZZ_JOBS:-2}

  # -O: optimised; -a: debug assertions (integer overflow checks too). AddressSanitizer is on
  # (cargo-fuzz's default), for the unsafe code of the HAL's DMA buffers and the mock's memory.
  cargo +nightly fuzz build -O -a

  logs=$(mktemp -d)
  run_one() {
    local t=$1
    mkdir -p "corpus/$t" "seeds/$t"
    local opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
    local env=(ASAN_OPTIONS=detect_odr_violation=0)
    if [[ $t == driver_cmd_out ]]; then
      # The driver leaks, on purpose, the memory of an object the device would not destroy
      # (the device may still write it): not a leak to report.
      opts+=(-detect_leaks=0)
      env=(ASAN_OPTIONS=detect_leaks=0:detect_odr_violation=0)
      # A lie about a MANAGE_PAGES result leaves the driver's page count off by the batch:
      # teardown then retries reclaiming for its 5 s (of the mock's virtual time), some
      # 5,000 commands, several seconds of real time under AddressSanitizer. Bounded, so
      # allowed; a hang would still exceed this.
      opts+=(-timeout=60)
    fi
    if env "${env[@]}" "target/x86_64-unknown-linux-gnu/release/$t" \
      -artifact_prefix="artifacts/$t/" "${opts[@]}" "corpus/$t" "seeds/$t" >"$logs/$t" 2>&1; then
      echo ok >"$logs/$t.status"
    else
      echo failed >"$logs/$t.status"
    fi
  }

  running=0
  for t in "${targets[@]}"; do
    mkdir -p "artifacts/$t"
    run_one "$t" &
    running=$((running + 1))
    if [[ $running -ge $jobs ]]; then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait || true

  failed=()
  for t in "${targets[@]}"; do
    if [[ $(cat "$logs/$t.status" 2>/dev/null) == ok ]]; then
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t")
      last=$(grep -E '^#[0-9]+' "$logs/$t" | tail -1 |
        grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9a-zA-Z]+' || true)
      printf 'fuzz %-16s %11s executions in %ss  %s\n' "$t" "$runs" "$secs" "$last"
    else
      echo "fuzz $t: FAILED"
      grep -vE '^#[0-9]+' "$logs/$t" | tail -60
      failed+=("$t")
    fi
  done
  rm -rf "$logs"
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz targets that crashed: ${failed[*]} (inputs in fuzz/artifacts/)"
    exit 1
  fi
}

main "$@"
