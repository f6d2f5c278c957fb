#!/usr/bin/env bash
# Tests/run.sh — every test, after `make test`'s one build (release, test targets included,
# TONEARM_TESTABLE): the Swift suites in three lanes at once, each lane's suites one after the
# other, then the engine's end-to-end suite alone. The end-to-end suites mostly wait (for frames
# paced in real time, for processes, for PostgreSQL): run one after the other they kept about
# two thirds of one core busy.
#
#   cluster  the suites that start PostgreSQL servers and three pairs (partition, cluster)
#   browser  Chromium's scenarios, then schemathesis (Tests/API) and the Discord bridge's tests
#            (bridges/discord), against the same executables
#   rest     every other suite, the unit tests among them
#   alone    last and by themselves: the engine's end-to-end suite, which holds the engine to its
#            deadlines with 30 and 60 sessions (beside the browser it missed them: 197 nulled
#            frames, a 140 ms gap; 2026-11-27), and ClusterDatabaseTests, whose statements have
#            deadlines of 200 ms (beside the other lanes, the statement after one given up failed
#            with a PSQLError in 2 of 2 runs that day; alone it passes)
#
# Each lane's output goes to its own log, printed whole when the lane ends; a failed test's lines
# are printed again at the end. Exits non-zero if anything failed. TEST_LANES=1 runs everything
# one after the other (as before 2026-11-27), for comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(TONEARM_TESTABLE=1 swift build -c release --show-bin-path)
export TONEARM_BIN_DIR=$bin
tests=$bin/tonearmPackageTests.xctest
[ -x "$tests" ] || { echo "no test build in $bin: run make test"; exit 1; }
cluster='PartitionEndToEndTests|ClusterEndToEndTests'
browser='BrowserEndToEndTests'
alone='EngineEndToEndTests|ClusterDatabaseTests'
logs=$(mktemp -d /tmp/tonearm-tests.XXXXXX)
started=$(date +%s)

swift_tests() {  # swift-testing's own command line, as `swift test` passes it
  "$tests" --testing-library swift-testing --no-parallel "$@"
}
others() {
  Tests/API/run.sh && (cd bridges/discord && python3 -m pytest -q)
}

if [ "${TEST_LANES:-3}" = 1 ]; then
  swift_tests; a=$?
  others; b=$?
  exit $(( a || b ))
fi

lane() {  # name, then what it runs; its status lands in $logs/<name>.status
  local name=$1; shift
  ( "$@" >"$logs/$name.log" 2>&1; echo $? >"$logs/$name.status" ) &
}
lane cluster swift_tests --filter "$cluster"
browser_lane() {
  swift_tests --filter "$browser"; local a=$?
  others; local b=$?
  return $(( a || b ))
}
lane browser browser_lane
lane rest swift_tests --skip "$cluster|$browser|$alone"
echo "== Tests/run.sh: three lanes at once; logs in $logs"
wait
for name in cluster browser rest; do
  cat "$logs/$name.log"
  echo; echo "== Tests/run.sh: lane $name ended with status $(cat "$logs/$name.status") (all lanes after $(( $(date +%s) - started )) s)"
done
swift_tests --filter "$alone" 2>&1 | tee "$logs/alone.log"; echo "${PIPESTATUS[0]}" >"$logs/alone.status"
echo; echo "== Tests/run.sh: $alone ended with status $(cat "$logs/alone.status") after $(( $(date +%s) - started )) s"
failed=0
for name in cluster browser rest alone; do
  [ "$(cat "$logs/$name.status")" = 0 ] || failed=1
done
if [ $failed = 1 ]; then
  echo; echo "== Tests/run.sh: what failed:"
  grep -a -h -E '✘|error:|FAILED|failed' "$logs"/*.log | cut -c1-400 | tail -60
fi
exit $failed
