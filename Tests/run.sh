#!/usr/bin/env bash
# Tests/run.sh — every test, after `make test`'s one build (release, test targets included,
# TONEARM_TESTABLE): the Swift suites in two groups at once, each group's suites one after the
# other, then schemathesis (Tests/API) and the Discord bridge's tests (bridges/discord) after the
# shorter group. The end-to-end suites mostly wait (for frames paced in real time, for processes,
# for PostgreSQL): run one after the other they kept about two thirds of one core busy.
#
# Group "apart" holds the suites that start PostgreSQL servers and three pairs, or a browser; the
# other group holds the rest but five, which run alone afterwards: the engine's end-to-end suite,
# which holds the engine to its deadlines with 30 and 60 sessions (beside the browser it missed
# them: 197 nulled frames, a 140 ms gap; 2026-11-27), the three suites that hold a bystander
# session to 100 ms between frames at the engine's socket beside a hostile, slow or refused
# source (beside the other group, one saw 111.6 ms in CI at 24eda74), and ClusterDatabaseTests,
# whose statements have deadlines of 200 ms (beside the other group, the statement after one given
# up failed with a PSQLError in 2 of 2 runs that day; alone it passes). Three groups at once were
# tried on this 2-core host and cut 120 s, but four timing checks failed under the load (a
# crossfade's end event, a layer's stall, a close, a hand-over's gap), so two it is. Each group's output goes to
# its own log, printed whole when the group ends; a failed test's lines are printed again at the
# end. Exits non-zero if anything failed.
# TEST_GROUPS=1 runs everything one after the other (as before 2026-11-27), for comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(TONEARM_TESTABLE=1 swift build -c release --show-bin-path)
export TONEARM_BIN_DIR=$bin
tests=$bin/tonearmPackageTests.xctest
[ -x "$tests" ] || { echo "no test build in $bin: run make test"; exit 1; }
apart='BrowserEndToEndTests|PartitionEndToEndTests|ClusterEndToEndTests'
alone='EngineEndToEndTests|HostileSourceEndToEndTests|SlowSourceEndToEndTests|SourcePolicyEndToEndTests|ClusterDatabaseTests'
logs=$(mktemp -d /tmp/tonearm-tests.XXXXXX)
started=$(date +%s)

swift_tests() {  # swift-testing's own command line, as `swift test` passes it
  "$tests" --testing-library swift-testing --no-parallel "$@"
}
others() {
  Tests/API/run.sh && (cd bridges/discord && python3 -m pytest -q)
}
report() {  # name, status
  echo; echo "== Tests/run.sh: $1 ended with status $2 after $(( $(date +%s) - started )) s"
}

if [ "${TEST_GROUPS:-2}" = 1 ]; then
  swift_tests; a=$?
  others; b=$?
  exit $(( a || b ))
fi

( swift_tests --filter "$apart" >"$logs/apart.log" 2>&1; echo $? >"$logs/apart.status" ) &
apart_pid=$!
( swift_tests --skip "$apart|$alone" >"$logs/rest.log" 2>&1; s=$?
  others >"$logs/others.log" 2>&1; echo $(( s * 10 + $? )) >"$logs/rest.status" ) &
rest_pid=$!
echo "== Tests/run.sh: two groups at once; logs in $logs"
wait $apart_pid; cat "$logs/apart.log"; report "suites with PostgreSQL and the browser" "$(cat "$logs/apart.status")"
wait $rest_pid; cat "$logs/rest.log" "$logs/others.log"; report "the other suites, schemathesis and the bridge" "$(cat "$logs/rest.status")"
swift_tests --filter "$alone" 2>&1 | tee "$logs/alone.log"; echo "${PIPESTATUS[0]}" >"$logs/alone.status"
report "$alone, alone" "$(cat "$logs/alone.status")"
failed=0
for group in apart rest alone; do
  [ "$(cat "$logs/$group.status")" = 0 ] || failed=1
done
if [ $failed = 1 ]; then
  echo; echo "== Tests/run.sh: what failed:"
  grep -a -h -E '✘|error:|FAILED|failed' "$logs"/*.log | cut -c1-400 | tail -60
fi
exit $failed
