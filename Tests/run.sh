#!/usr/bin/env bash
# Tests/run.sh — every test, after `make test`'s one build (release, test targets included,
# TONEARM_TESTABLE): first at once the partition suite, schemathesis (Tests/API), the Discord
# bridge's tests (bridges/discord) followed by three cluster suites, and the Lavalink clients'
# (Tests/Lavalink); then the other Swift suites one after the other; then the browser's scenarios
# two at a time. With TONEARM_FUZZ_BESIDE (CI), the fuzz targets too: built beside the first group,
# run beside the Swift suites. Each grouping is explained where it runs, below. A failed test's
# lines are printed again at the end; exits non-zero if anything failed.
#
# One after the other on purpose. Many suites hold the engine and the Router to deadlines a
# listener hears (a bystander's 100 ms between frames, no frame missed under a stalling layer, a
# hand-over's gap), and on this 2-core host they do not hold beside a second group of suites:
# run in two groups at once (2026-11-27), the tests took 712 s instead of about 1,050 s, but
# three clean-clone CI runs in five failed a timing check each (a bystander's gap of 111.6 ms, a
# stalling layer's 3 missed frames, ClusterDatabaseTests' 200 ms deadlines), with a different
# suite every time. A check that fails because a neighbour took the CPU says nothing about
# Tonearm, and a CI that is red for it stops work from landing.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(TONEARM_TESTABLE=1 swift build -c release --show-bin-path)
export TONEARM_BIN_DIR=$bin
tests=$bin/tonearmPackageTests.xctest
[ -x "$tests" ] || { echo "no test build in $bin: run make test"; exit 1; }
logs=$(mktemp -d /tmp/tonearm-tests.XXXXXX)
# Lines the failure patterns match that are not failures: the processes' own log lines (a
# connection attempt that failed while a test had the database down on purpose) and
# schemathesis's report of what the API accepts ("Supports NULL byte in headers: ✘").
noise='^[0-9T:+-]+ (trace|debug|info|notice|warning) |Supports NULL byte|Accepts backslash'
started=$(date +%s)
report() {  # name, status
  echo; echo "== Tests/run.sh: $1 ended with status $2 after $(( $(date +%s) - started )) s"
}

# The suite that mostly waits, and whose deadlines are seconds: PartitionEndToEndTests cuts and
# mends a pair's link ten times and watches each for 14 s (169 s of CI's 1,095 s at eefced4), its
# checks a failover under 5.5 s and a heal under 1 s. It runs first, beside schemathesis, which
# has no deadline at all, and the Python tests (below). Every other suite has deadlines of
# 100–200 ms and runs alone (below).
waiting='PartitionEndToEndTests'
# Three cluster suites (130 s at fc05507) whose checks are seconds too (a play started within 3 s, a
# guild's voice back on its new owner, placement's shares) run in the first group as well, after
# the bridge's tests in their lane: beside the partition suite, the Lavalink clients, schemathesis
# and the fuzz build they passed (2026-11-30, twice), but the bridge's pacing beside them did not
# (p99 9.9 ms). The Swift suites' part shrinks by as much, and the fuzzing beside it by 190 s
# (.ci/run).
early='ClusterPlacementEndToEndTests|ClusterVoiceEndToEndTests|ClusterRoomEndToEndTests'
# The browser's scenarios (one Chromium, engine and Router each) run two at a time: at
# 2026-11-29 the suite took 118–125 s instead of 205 s, every control but pause still heard at p95
# within 164–267 ms (one at a time: 174–262 ms) against its 500 ms bound, in two runs. They keep
# about 70 % of the machine busy, so nothing else runs beside them: beside the Python tests,
# the bridge's pacing checks and three of the page's Media Source controls failed.
browser='BrowserEndToEndTests'
# CI's fuzzing (TONEARM_FUZZ_BESIDE, set by .ci/run; unset, nothing of it runs). The four
# libFuzzer targets are built once the bridge's tests are done (their build recompiles Tonearm's
# modules in .build/release; the executables and the test bundle every test runs were linked
# before and stay as they are), on the last CPU only and at the idle scheduling class. Not beside
# the bridge's tests: on both CPUs, even at the idle class, the build made their pacing check fail
# (p99 9.2 ms between packets against 5 ms, 2026-11-30), and on one CPU it failed once in three
# (7.2 ms). Built, each target runs in one process (for the seconds TONEARM_FUZZ_BESIDE gives:
# Tests/Fuzz/run.sh's arguments) at the idle class beside the Swift suites, which keep about 20 %
# of the machine busy: a fuzzer is CPU alone, and SCHED_IDLE gives way at once to any suite's
# thread that wakes. The suites do not wait for the build: what is left of it (about 140 s) runs
# beside their first part, the unit tests and the cluster suites whose checks are seconds, as the
# fuzzer does after it. Alone before the suites, the build took 140–172 s of CI.
fuzz=0
fuzz_pid=
if [ -n "${TONEARM_FUZZ_BESIDE:-}" ]; then
  last_cpu=$(( $(nproc) - 1 ))
  (
    while [ ! -e "$logs/bridge.done" ]; do sleep 1; done
    if taskset -c "$last_cpu" chrt --idle 0 env FUZZ_STEP=build Tests/Fuzz/run.sh >"$logs/fuzz-build.log" 2>&1; then
      while [ ! -e "$logs/first-group.done" ]; do sleep 1; done
      # shellcheck disable=SC2086 # seconds, then targets, some with seconds of their own
      FUZZ_STEP=run FUZZ_JOBS=1 chrt --idle 0 Tests/Fuzz/run.sh $TONEARM_FUZZ_BESIDE >"$logs/fuzz.log" 2>&1
    else
      echo "== the fuzz targets did not build" >"$logs/fuzz.log"; false
    fi
    echo $? >"$logs/fuzz.status"
  ) &
  fuzz_pid=$!
fi
# The first four at once: the partition suite, schemathesis, the bridge's tests (then the three
# cluster suites) and the Lavalink clients' all mostly wait (in pairs they kept 31 % and 23 % of
# the machine busy, 2026-11-30, 10 s samples) and none holds a deadline under seconds but the
# bridge's pacing checks (p99 between packets within 5 ms of 20 ms, no gap of 40 ms), which hold
# beside the Lavalink clients but not beside the browser's scenarios (a 50 ms gap; those keep
# about 62 % busy), the cluster suites or a build.
( "$tests" --testing-library swift-testing --no-parallel --filter "$waiting" >"$logs/waiting.log" 2>&1; echo $? >"$logs/waiting.status" ) &
waiting_pid=$!
( Tests/API/run.sh >"$logs/api.log" 2>&1; echo $? >"$logs/api.status" ) &
api_pid=$!
( cd bridges/discord && python3 -m pytest -q >"$logs/bridge.log" 2>&1; echo $? >"$logs/bridge.status"
  touch "$logs/bridge.done"
  cd ../.. && "$tests" --testing-library swift-testing --no-parallel --filter "$early" >"$logs/early.log" 2>&1; echo $? >"$logs/early.status" ) &
bridge_pid=$!
python3 -m pytest -q Tests/Lavalink >"$logs/lavalink.log" 2>&1
lavalink=$?
wait "$waiting_pid" "$api_pid" "$bridge_pid"
cat "$logs/api.log" "$logs/waiting.log" "$logs/bridge.log" "$logs/early.log" "$logs/lavalink.log"
api=$(cat "$logs/api.status")
partition=$(( $(cat "$logs/waiting.status") || $(cat "$logs/early.status") ))
pythons=$(( $(cat "$logs/bridge.status") || lavalink ))
report "$waiting and three cluster suites ($partition), schemathesis ($api), the bridge's tests ($(cat "$logs/bridge.status")) and the Lavalink clients' ($lavalink) at once" "$(( partition || api || pythons ))"
touch "$logs/first-group.done"
# swift-testing's own command line, as `swift test` passes it
"$tests" --testing-library swift-testing --no-parallel --skip "$waiting" --skip "$early" --skip "$browser" 2>&1 | tee "$logs/swift.log"
swift=${PIPESTATUS[0]}
report "the Swift suites but those above and $browser" "$swift"
if [ -n "$fuzz_pid" ]; then
  wait "$fuzz_pid"
  fuzz=$(cat "$logs/fuzz.status")
  cat "$logs/fuzz-build.log" "$logs/fuzz.log"
  report "the fuzz targets, built beside the first group, run beside the Swift suites ($TONEARM_FUZZ_BESIDE)" "$fuzz"
fi
"$tests" --testing-library swift-testing --experimental-maximum-parallelization-width 2 --filter "$browser" 2>&1 \
  | tee "$logs/browser.log"
browser_status=${PIPESTATUS[0]}
report "$browser, two scenarios at a time" "$browser_status"
[ "$browser_status" = 0 ] && [ "$partition" = 0 ] || swift=1
others=$(( pythons || api || fuzz ))
if [ "$swift" != 0 ] || [ "$others" != 0 ]; then
  echo; echo "== Tests/run.sh: what failed (logs in $logs):"
  grep -a -h -E '✘|error:|FAILED|failed' "$logs"/*.log | grep -a -v -E "$noise" | cut -c1-400 | tail -60
  exit 1
fi
