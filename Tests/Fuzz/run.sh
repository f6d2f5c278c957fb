#!/usr/bin/env bash
# Tests/Fuzz/run.sh SECONDS [TARGET[=SECONDS]…] — builds the libFuzzer targets in .build/release
# (Tonearm's own modules with coverage and AddressSanitizer, the dependencies as in any release
# build; see Package.swift), seeds each corpus (kept in .build-fuzz/corpus between runs, so later
# runs start where earlier ones stopped), runs each target for SECONDS (or for its own, written
# `FuzzEvents=90`) in FUZZ_JOBS processes at once (one per core by default, sharing the corpus),
# and prints executions, corpus size and the outcome per target. Exits non-zero if any target
# crashed; the crashing input is kept in .build-fuzz/artifacts/ (replay:
# .build/release/<Target> <file>); once fixed, keep it in Tests/Fuzz/Regressions/<Target>/ so
# every later run tries it first.
# FUZZ_STEP=build only builds, FUZZ_STEP=run only runs what was built (CI builds beside one group
# of tests and fuzzes beside another: Tests/run.sh); the default does both.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(FuzzWire FuzzEvents FuzzCommands FuzzMedia)
# A target named with `=SECONDS` runs that long; the others SECONDS.
declare -A seconds_of
for i in "${!targets[@]}"; do
  case ${targets[$i]} in *=*) seconds_of[${targets[$i]%%=*}]=${targets[$i]#*=}; targets[$i]=${targets[$i]%%=*} ;; esac
done
work=.build-fuzz
jobs=${FUZZ_JOBS:-$(nproc)}
# The flags of every other release build here (the Makefile's RELEASE): others would rebuild every
# dependency.
flags=(-c release)
step=${FUZZ_STEP:-all}
bin=$(TONEARM_FUZZ=1 swift build "${flags[@]}" --show-bin-path)
if [ "$step" != run ]; then
  # All four in one build (the package holds nothing else then: Package.swift), some one by one.
  if [ ${#targets[@]} -eq 4 ]; then
    echo "== building ${targets[*]}"
    TONEARM_FUZZ=1 swift build "${flags[@]}" 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -6
  else
    for target in "${targets[@]}"; do
      echo "== building $target"
      TONEARM_FUZZ=1 swift build "${flags[@]}" --product "$target" 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -3
    done
  fi
  for target in "${targets[@]}"; do
    [ -x "$bin/$target" ] || { echo "== $target did not build"; exit 1; }
  done
fi
[ "$step" != build ] || exit 0
python3 Tests/Fuzz/seeds.py "$work/seeds"
mkdir -p "$work/artifacts"
status=0
summary=()
for target in "${targets[@]}"; do
  target_seconds=${seconds_of[$target]:-$seconds}
  corpus=$work/corpus/$target
  mkdir -p "$corpus"
  # Inputs that once crashed a target (Tests/Fuzz/Regressions/<Target>/) are read with the seeds.
  inputs=("$corpus" "$work/seeds/$target")
  [ -d "Tests/Fuzz/Regressions/$target" ] && inputs+=("Tests/Fuzz/Regressions/$target")
  # Media files need room; the wire reader's limits are all reachable from short inputs (whole
  # 64 KB frames are the unit tests' part), and short inputs run many times faster.
  case $target in FuzzMedia) max_len=65536 ;; FuzzWire) max_len=4096 ;; *) max_len=16384 ;; esac
  echo "== $target for $target_seconds s, $jobs process(es)"
  pids=()
  rm -f "$work/$target".*.log
  for job in $(seq "$jobs"); do
    # Leaks are not what these targets look for, and a report at exit would end the run.
    ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$bin/$target" "${inputs[@]}" \
      -max_total_time="$target_seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$target-" >"$work/$target.$job.log" 2>&1 &
    pids+=($!)
  done
  code=0
  for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
  runs=$(cat "$work/$target".*.log | grep -o 'stat::number_of_executed_units: *[0-9]*' | grep -o '[0-9]*$' | awk '{ n += $1 } END { print n + 0 }')
  rate=$(( ${runs:-0} / target_seconds ))
  units=$(ls "$corpus" | wc -l)
  if [ $code -eq 0 ]; then outcome="no crash"
  else outcome="FAILED (exit $code; see $work/$target.*.log)"; status=1; tail -n 40 "$work/$target".*.log; fi
  summary+=("$(printf '%-13s %4s s %12s executions %7s exec/s %6s corpus units  %s' "$target" "$target_seconds" "$runs" "$rate" "$units" "$outcome")")
done
echo; echo "== fuzz summary"; printf '%s\n' "${summary[@]}"
exit $status
