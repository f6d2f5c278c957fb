# Tonearm: the two commands of the README, and the steps behind them.
#   make run   installs system packages, builds, creates ./demo-media and starts both processes
#   make test  installs what is missing, builds, and runs every test

SHELL := /bin/bash
# What building and running need; `make run` installs only these.
APT_PACKAGES := pkg-config libopus-dev libavcodec-dev libavformat-dev libswresample-dev libavutil-dev libsqlite3-dev \
                ffmpeg python3
PIP_PACKAGES := yt-dlp==2026.10.26
# What the tests add: opus-tools (opusinfo; opusenc/opusdec for bench-quality), Chromium and
# Playwright (the playground), curl, openssl and certutil (the TLS tests), promtool (the metrics
# checks), iproute2 (`ip netns`: a network host whose name server a test controls), postgresql
# (the cluster tests start a server of their own; nothing uses the one the package sets up) with
# pg_auto_failover (postgresql-15-auto-failover: the database's failover test), schemathesis
# (the API against its OpenAPI document), the Discord bridge's own dependencies with pytest
# (bridges/discord), numpy (bench-quality's auditory model), and cryptography (OpenSSL's AES-GCM,
# which with the bridge's PyNaCl opens the voice packets Tonearm seals: Tests/DiscordVoiceTests),
# four Lavalink clients, lavalink.py, wavelink, mafic and pomice (pomice brings websockets; all unchanged,
# played through Tonearm: Tests/Lavalink),
# and rfc9420 (an MLS implementation: the stand-in voice server plays DAVE's external sender with it).
TEST_APT_PACKAGES := opus-tools chromium curl openssl libnss3-tools prometheus iproute2 nftables postgresql postgresql-15-auto-failover
TEST_PIP_PACKAGES := numpy==2.4.6 cryptography==48.0.0 playwright==1.49.1 schemathesis==4.32.5 discord.py[voice]==2.7.1 davey==0.1.7 pytest==9.2.0 simcord==3.2.1 lavalink==5.11.1 wavelink==3.5.2 mafic==2.11.0 pomice==2.11.1 websockets==17.4 rfc9420==1.3.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_MEDIA ?= $(CURDIR)/demo-media
RUN_DIR ?= /tmp/tonearm-run
export TONEARM_SOCKET ?= $(RUN_DIR)/engine.sock
export TONEARM_MEDIA_DIR ?= $(DEMO_MEDIA)
# Every build here is this one release build, with the Swift runtime shared: the same flags
# everywhere keep one build in .build/release (different flags rebuild every module; swift-testing
# exists only as a shared library, so the tests cannot link the runtime in statically), and CI's
# deployment step puts the executables the tests ran against into the image, with the Swift
# runtime's libraries they use (deploy/smoke-test.sh, TONEARM_IMAGE_BINARIES=host).
RELEASE := swift build -c release

.PHONY: deps deps-test install-packages build build-release test test-sanitizers test-tsan test-tsan-build test-tsan-run test-asan run demo-media clean bench bench-smoke bench-smoke-built bench-smoke-rest bench-smoke-engine-rows bench-smoke-other-rows bench-quality bench-micro deploy-test soak chaos fuzz

## Installs the Debian packages and Python tools Tonearm needs to build and run (skipped when all
## are present); `deps-test` adds what the tests need.
deps:
	@$(MAKE) --no-print-directory install-packages APT="$(APT_PACKAGES)" PIP="$(PIP_PACKAGES)"

deps-test: deps
	@$(MAKE) --no-print-directory install-packages APT="$(TEST_APT_PACKAGES)" PIP="$(TEST_PIP_PACKAGES)"

## Which of the pinned Python packages given are not installed at that version, in one process
## (one `pip show` each took 28 s of `make test` on a busy machine, this 2.6 s). Names compare as
## pip compares them.
export PIP_MISSING := import sys, re, importlib.metadata as m; name = lambda s: re.sub(r"[-_.]+", "-", s).lower(); \
	have = {}; [have.setdefault(name(d.metadata["Name"]), d.version) for d in m.distributions() if d.metadata["Name"]]; \
	print(" ".join(p for p in sys.argv[1:] if have.get(name(p.split("==")[0].split("[")[0])) != p.split("==")[-1]))
install-packages:
	@missing=$$(for p in $(APT); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	python3 -m pip --version >/dev/null 2>&1 || missing="$$missing python3-pip"; \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@for p in $$(python3 -c "$$PIP_MISSING" $(PIP)); do \
		python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "$$p" 2>/dev/null || \
		python3 -m pip install --quiet --disable-pip-version-check "$$p"; \
	done

build: deps
	swift build

build-release: deps
	$(RELEASE)

## Generates a small demo library with ffmpeg's test sources (only when it is missing).
demo-media:
	@if [ ! -d "$(DEMO_MEDIA)" ]; then \
		mkdir -p "$(DEMO_MEDIA)"; \
		for f in 220 440 880; do \
			ffmpeg -nostdin -loglevel error -y -f lavfi -i "aevalsrc=0.4*sin(2*PI*$$f*t)|0.4*sin(2*PI*$$f*t):s=44100:d=120" \
				"$(DEMO_MEDIA)/tone-$$f.mp3"; \
		done; \
		ffmpeg -nostdin -loglevel error -y -f lavfi \
			-i "aevalsrc=0.2*sin(2*PI*261.63*t)+0.2*sin(2*PI*329.63*t)+0.2*sin(2*PI*392*t)|0.2*sin(2*PI*261.63*t)+0.2*sin(2*PI*329.63*t)+0.2*sin(2*PI*392*t):s=48000:d=120" \
			-metadata title="C major chord" -c:a libopus -b:a 128k "$(DEMO_MEDIA)/chord.webm"; \
		echo "demo media in $(DEMO_MEDIA)"; \
	fi

## Builds the two executables (release; no test targets, nothing of Benchmarks/), creates the
## demo media and runs AudioEngine and Router until Ctrl-C. One build of both rather than one per
## product: the Router's own dependencies then compile while the engine's chain of modules waits on
## itself (from nothing, 440 s against 282 + 224 s, the same hour on 2026-11-30).
run: deps demo-media
	$(RELEASE)
	@mkdir -p "$(RUN_DIR)"
	@bin=$$($(RELEASE) --show-bin-path); \
	"$$bin/AudioEngine" & engine=$$!; \
	trap 'kill $$engine 2>/dev/null; wait $$engine' EXIT INT TERM; \
	echo "Tonearm: open http://$${TONEARM_ROUTER_HOST:-127.0.0.1}:$${TONEARM_ROUTER_PORT:-8080}/ and play tone-440.mp3"; \
	"$$bin/Router"

## Builds everything once and runs every test suite. One release build serves all of them
## (TONEARM_TESTABLE, Package.swift): the end-to-end tests start its two executables, as a user
## would run them, and the unit tests run in its test targets. Tests/run.sh then runs, against the
## same executables, schemathesis (both OpenAPI documents, Tests/API), the Discord bridge's tests
## (bridges/discord), the Lavalink clients' (Tests/Lavalink) and the suites that mostly wait, at
## once; then the other Swift suites one after the other; then the browser's scenarios.
## First, in a second: does Package.swift load from what the image's Dockerfile copies?
TESTABLE := TONEARM_TESTABLE=1
test: deps-test
	deploy/check-build-context.sh
	$(TESTABLE) $(RELEASE) --build-tests
	Tests/run.sh

## The unit tests under ThreadSanitizer, then every end-to-end test against AddressSanitizer builds
## of both executables (docs/reliability.md). ThreadSanitizer instruments Tonearm's own modules
## and unit tests (TONEARM_TSAN in Package.swift; its package leaves out what it does not run) on
## top of `make test`'s release build of the dependencies, in `.build/release`: after `make test`
## it recompiles only Tonearm, and the next
## `make test` or `make run` recompiles it back (so CI runs it last). AddressSanitizer has its own
## build folder (.build-asan), every dependency built again: about 18 minutes on two cores. CI runs
## test-tsan; test-asan does not fit CI's time.
UNIT_TESTS := AudioEngineTests|RouterTests|WireProtocolTests
test-sanitizers: test-tsan test-asan

## PacerTests is left out under ThreadSanitizer: its real pacer thread contends with the test's
## thread for the session table's Mutex, and a Mutex that waits takes its lock inside the
## Synchronization library's futex path, which ThreadSanitizer does not see, so it reports the two
## locked accesses as a race (seen 2026-11-24, SessionManager.info against collectTick, both
## inside `state.withLock`). changesWhileTheTicksTakeFramesLoseAndRepeatNothing is left out for the
## same reason: its control thread calls setVolume against the ticks (the same report, reshape
## against collectTick, in CI at 03fe67c). aSeekIsNotCountedAsLateFrames is left out too: it holds
## the workers to real time, which an instrumented decoder misses now and then (2 of 3 runs that
## day). All three run in `make test`. Since ThreadSanitizer runs on the release build (2026-11-27)
## the three suites of single-threaded arithmetic once left out for CI's time (TimescaleTests,
## LoudnessTests, WireMessageDecoderTests: 226 of 296 s on a slow day) take 20 s, and run here again.
TSAN_SKIP := PacerTests|aSeekIsNotCountedAsLateFrames|changesWhileTheTicksTakeFramesLoseAndRepeatNothing
test-tsan: test-tsan-build
	@$(MAKE) --no-print-directory test-tsan-run
test-tsan-build: deps-test
	TONEARM_TSAN=1 $(TESTABLE) $(RELEASE) --build-tests
test-tsan-run:
	TSAN_OPTIONS=halt_on_error=1 "$$(TONEARM_TSAN=1 $(TESTABLE) $(RELEASE) --show-bin-path)/tonearmPackageTests.xctest" \
		--testing-library swift-testing --no-parallel --filter '$(UNIT_TESTS)' --skip '$(TSAN_SKIP)'

## A memory error aborts the executable (every test using it fails) and leaves AddressSanitizer's
## report in .build-asan/reports, printed here. Leak reports are off: executables the tests kill
## cannot free what they hold.
test-asan: deps-test
	swift build -c release --sanitize=address --scratch-path .build-asan --product AudioEngine
	swift build -c release --sanitize=address --scratch-path .build-asan --product Router
	$(TESTABLE) $(RELEASE) --build-tests
	rm -rf .build-asan/reports && mkdir -p .build-asan/reports
	ASAN_OPTIONS=detect_leaks=0:log_path=$(CURDIR)/.build-asan/reports/asan TONEARM_BIN_DIR=$(CURDIR)/.build-asan/release \
		"$$($(TESTABLE) $(RELEASE) --show-bin-path)/tonearmPackageTests.xctest" --testing-library swift-testing \
		--no-parallel --filter EndToEndTests; status=$$?; \
	if ls .build-asan/reports/asan.* >/dev/null 2>&1; then cat .build-asan/reports/asan.*; exit 1; fi; exit $$status

## The load tool against release builds (docs/benchmarks.md): about 35 minutes on two cores
## (2,038 s on 2026-11-26).
## BENCH_ARGS picks rows and sizes, e.g. make bench BENCH_ARGS="--rows pacing --pacing-seconds 60".
## The load tool's listeners come with the test build (TONEARM_TESTABLE, as CI sets it), else
## from a build with the bench targets.
bench: deps
	$(RELEASE)
	[ -n "$$TONEARM_TESTABLE" ] || TONEARM_BENCHMARKS=1 $(RELEASE) --product tonearm-listeners
	Benchmarks/Load/tonearm-load $(BENCH_ARGS)

## The soak run of docs/reliability.md: 60 sessions with churn for an hour, one engine restart
## (not in CI). SOAK_ARGS changes it, e.g. make soak SOAK_ARGS="--soak-seconds 600".
soak: deps
	$(RELEASE)
	Benchmarks/Load/tonearm-load --rows soak $(SOAK_ARGS)

## The chaos run of docs/benchmarks.md: three pairs on PostgreSQL, 60 guilds, every 60 s a random
## pair killed and restarted or (as root, each pair in a network namespace of its own) cut off for
## 8 s and mended, in turn, for 10 minutes (not in CI; PostgreSQL comes with the test packages).
## CHAOS_ARGS changes it, e.g. make chaos CHAOS_ARGS="--chaos-every 30"; with "--chaos-every 30
## --chaos-database 6" the database is pg_auto_failover's and six of those events strike its primary.
chaos: deps-test
	$(RELEASE)
	Benchmarks/Load/tonearm-load --rows chaos $(CHAOS_ARGS)

## libFuzzer targets (Tests/Fuzz) with AddressSanitizer, FUZZ_SECONDS each (docs/reliability.md).
## They build into .build/release beside a release build (about 2 minutes after one).
FUZZ_SECONDS ?= 600
fuzz: deps
	Tests/Fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

## Every row of the load tool at toy sizes, in about three minutes, and the chaos row's cluster for
## 18 s with a kill and a cut (CI runs it; no thresholds). bench-smoke-built does the same with the
## executables in BENCH_BIN, built before (CI: those `make test` tested, copied aside), in three
## processes at once, each one's output printed as it ends: the rows that measure the engine alone,
## the others (together, the load tool's default rows), and the chaos row. Beside each other their
## figures are not the machine's own, and a smoke run judges none of them; it takes about half the
## time (2026-11-30: 142 s, against 216 s for the rows alone in one process, and 299 s for all of
## it one after the other beside CI's deployment).
BENCH_BIN ?= .build/release
SMOKE_ENGINE_ROWS := features,baseline,pacing,fanout
SMOKE_OTHER_ROWS := ceiling,transcode,overload,passthrough,station,hls,voice,lavalink,control
bench-smoke: BENCH_ARGS = --smoke
bench-smoke: bench deps-test
	@$(MAKE) --no-print-directory bench-smoke-rest

bench-smoke-built: deps-test
	@$(MAKE) --no-print-directory -j3 --output-sync=target bench-smoke-engine-rows bench-smoke-other-rows bench-smoke-rest
bench-smoke-engine-rows:
	Benchmarks/Load/tonearm-load --bin $(BENCH_BIN) --smoke --rows $(SMOKE_ENGINE_ROWS)
bench-smoke-other-rows:
	Benchmarks/Load/tonearm-load --bin $(BENCH_BIN) --smoke --rows $(SMOKE_OTHER_ROWS)

bench-smoke-rest:
	Benchmarks/Load/tonearm-load --bin $(BENCH_BIN) --rows chaos --chaos-seconds 18 --chaos-every 6 --chaos-guilds 6 --chaos-cut 4
	Benchmarks/Quality/opus-quality --check

## What each Opus complexity step costs and does to the sound at 128 kbit/s (docs/benchmarks.md
## § Opus complexity): opusenc/opusdec over six synthetic excerpts, an auditory model in numpy.
bench-quality: deps-test
	Benchmarks/Quality/opus-quality $(QUALITY_ARGS)

## The micro-benchmarks: wire format, Opus encode, pacer tick, Router publish (package-benchmark,
## which builds them in release; they exist only when TONEARM_BENCHMARKS is set).
bench-micro: deps
	TONEARM_BENCHMARKS=1 swift package benchmark --target TonearmBenchmarks --format markdown

## docker-compose up --build for real (podman here, through ../shared/tools/offline-containers.sh),
## from no cached Tonearm layer: build, health, a tone heard, an engine restart, a graceful stop.
## TONEARM_IMAGE_BINARIES=host puts the release build of `make test` into the image instead of
## compiling the executables inside it (CI; Debian 12 hosts only).
deploy-test:
	deploy/smoke-test.sh

clean:
	rm -rf .build "$(DEMO_MEDIA)"
