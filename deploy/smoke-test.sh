#!/usr/bin/env bash
# deploy/smoke-test.sh — runs the real `docker-compose --profile https up -d --build` from deploy/,
# then checks as a user would, through the published ports on 127.0.0.1 only: health, a generated
# tone played through the API and heard over a bot WebSocket and the Ogg /listen stream, the same
# over HTTPS through Caddy (wss:// and https://, verified against Caddy's own authority), HLS
# through Caddy's cache (a segment a hit the second time, decoded to the tone), an engine
# restart the Router recovers from, the Discord bot (`--profile discord`: up without Discord, saying
# why on its /health, its offline tests passing inside its image), the Router serving TLS itself
# with docker-compose.tls.yml and a test authority's certificate, a graceful stop, `docker-compose
# down -v`; then the cluster file (three pairs on PostgreSQL behind Caddy: a guild heard through
# the balancer, the pair playing it killed, the guild heard again). Exits non-zero and says what
# failed on any failure.
#
# TONEARM_IMAGE_BINARIES=host puts this host's release build (`swift build -c release`, which
# `make test` makes; Debian 12 only, like the image) with the Swift runtime's libraries it links into the image
# instead of building the executables inside it (the Dockerfile's `prebuilt` stage). CI does this:
# the image then holds the binaries its tests ran against, and the step takes about 1,000 s less.
# Unset, the image's own build stage compiles them from the sources, as `docker-compose up --build`
# does for a user.
#
# With a Docker engine (DOCKER_HOST or /var/run/docker.sock) it uses that. Without one — this
# project's CI machines reach no image registry — it uses ../shared/tools/offline-containers.sh:
# podman with a Docker-compatible API and local stand-ins for the two base images.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEPLOY=$ROOT/deploy
PROJECT=tonearm-smoke
WORK=$(mktemp -d /tmp/tonearm-smoke.XXXXXX)
OFFLINE_TOOL=$ROOT/../shared/tools/offline-containers.sh
PROBE=$ROOT/Tests/Fixtures/ws_probe.py   # a raw WebSocket client that records Opus as Ogg
failures=0

step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok   %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; failures=$((failures + 1)); }

# ---- a Docker API -----------------------------------------------------------------------------
podman_mode=0
if [ -z "${DOCKER_HOST:-}" ] && [ ! -S /var/run/docker.sock ]; then
  [ -x "$OFFLINE_TOOL" ] || { echo "no Docker engine and no $OFFLINE_TOOL"; exit 1; }
  step "no Docker engine here: podman with local base images (offline-containers.sh)"
  source <("$OFFLINE_TOOL" env)
  if ! command -v podman >/dev/null || ! podman image exists docker.io/library/swift:6.3-bookworm; then
    "$OFFLINE_TOOL" setup
  fi
  # The API socket outlives its service (a reboot, a killed session, /tmp kept): the tool then
  # reports "already running" for a socket nobody answers. Clear a socket that does not answer.
  socket=${DOCKER_HOST#unix://}
  answers() { curl -sf --max-time 3 --unix-socket "$socket" http://d/_ping >/dev/null 2>&1; }
  if [ -S "$socket" ] && ! answers; then
    echo "a stale podman API socket ($socket): starting the service again"
    rm -f "$socket"
  fi
  # A service whose working directory is gone (started from a clone an earlier CI run has since
  # deleted) answers but cannot start a container: conmon inherits the directory, cannot get it
  # and exits, and compose reports "write child: broken pipe" (seen in CI on 2026-11-24). Stop
  # such a service; start services from / so that their directory cannot go away.
  for pid in $(pgrep -f "podman system service.*$socket" || true); do
    if readlink "/proc/$pid/cwd" 2>/dev/null | grep -q ' (deleted)$'; then
      echo "the podman API service (pid $pid) runs in a deleted directory: starting it again"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
      rm -f "$socket"
    fi
  done
  (cd / && "$OFFLINE_TOOL" api)
  for _ in $(seq 100); do answers && break; sleep 0.1; done
  answers || { echo "the podman API on $socket does not answer; see $(dirname "$socket")/api.log"; exit 1; }
  podman_mode=1
  # No PyPI inside the build here: hand the image the yt-dlp wheel from the host's pip.
  export PIP_NO_INDEX=1
fi
# Debian 12's netavark (1.4; fixed upstream in 2023, containers/netavark#833) leaves a network's bridge with the kernel's default
# address, the lowest of its ports': each container that starts or stops can change it. A
# container that has the old one cached reaches nothing at the gateway until its neighbour
# entry fails and is resolved again, and the gateway is where aardvark-dns answers, so its
# names stop resolving: a Router's connections to PostgreSQL, to its engine's health and to
# the other pairs time out. Seen here as the cluster step's first listen hearing nothing
# (docs/operations.md). Each bridge's address is pinned the moment it appears, so it never
# changes. It runs wherever podman does (this script's podman mode, or a DOCKER_HOST given to
# podman's service), as root.
if command -v podman >/dev/null && [ "$(id -u)" = 0 ]; then
  ( while sleep 0.05; do
      for dev in /sys/class/net/podman*; do
        [ -e "$dev/bridge" ] && [ "$(cat "$dev/addr_assign_type" 2>/dev/null)" != 3 ] \
          && { ip link set dev "${dev##*/}" address "$(cat "$dev/address" 2>/dev/null)" 2>/dev/null || true; }
      done
    done ) &
  pin_loop=$!
fi
# The host's pip fetches the wheels (PIP_NO_INDEX applies to the image builds only): yt-dlp for
# the engine, the Discord bot's dependencies for its image.
env -u PIP_NO_INDEX python3 -m pip download --quiet --no-deps --dest "$DEPLOY/wheels" "yt-dlp==2026.10.26" \
  || echo "could not download yt-dlp here; the image build will try PyPI itself"
env -u PIP_NO_INDEX python3 -m pip download --quiet --dest "$DEPLOY/wheels" --python-version 3.11 --only-binary=:all: \
  "discord.py[voice]==2.7.1" "davey==0.1.7" "pytest==9.2.0" \
  || echo "could not download the Discord bot's wheels here; its image build will try PyPI itself"

compose() { docker-compose -p "$PROJECT" -f "$DEPLOY/docker-compose.yml" --profile https --profile discord "$@"; }
# The cluster (docker-compose.cluster.yml): three pairs, PostgreSQL and Caddy in front.
ccompose() { docker-compose -p "$PROJECT-cluster" -f "$DEPLOY/docker-compose.cluster.yml" "$@"; }

cleanup() {
  step "docker-compose down -v"
  [ "$failures" -eq 0 ] || compose logs --tail 40 2>&1 | tail -80 || true
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  [ -n "${TONEARM_POSTGRES_PASSWORD:-}" ] && ccompose down -v --remove-orphans >/dev/null 2>&1 || true
  [ -n "${health_loop:-}" ] && kill "$health_loop" 2>/dev/null || true
  [ -n "${pin_loop:-}" ] && kill "$pin_loop" 2>/dev/null || true
  rm -rf "$WORK" "$DEPLOY"/wheels/*.whl "$DEPLOY/prebuilt"
}
trap cleanup EXIT

# ---- configuration: a free port, a bot token, generated media --------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Ports used together are chosen together, all held at once: two chosen one after the other can be
# the same one.
read -r PORT HTTPS_PORT HTTP_PORT BRIDGE_PORT < <(python3 -c 'import socket; s = [socket.socket() for _ in range(4)]; [x.bind(("127.0.0.1", 0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
BOT=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
mkdir -p "$WORK/media"
ffmpeg -nostdin -loglevel error -f lavfi -i "aevalsrc=0.5*sin(2*PI*440*t)|0.5*sin(2*PI*440*t):s=44100:d=60" "$WORK/media/tone-440.mp3"
chmod -R a+rX "$WORK"
export TONEARM_PUBLISH=127.0.0.1:$PORT TONEARM_BOT_TOKEN=$BOT TONEARM_MEDIA=$WORK/media TONEARM_VERSION=smoke
export TONEARM_HTTPS_PUBLISH=127.0.0.1:$HTTPS_PORT TONEARM_HTTP_PUBLISH=127.0.0.1:$HTTP_PORT TONEARM_DOMAIN=localhost
export PIP_NO_INDEX=${PIP_NO_INDEX:-}
# The bot has no Discord to reach here: it must stay up and say so.
export DISCORD_TOKEN=smoke-test-no-discord TONEARM_BRIDGE_PUBLISH=127.0.0.1:$BRIDGE_PORT
URL=http://127.0.0.1:$PORT

binaries=compiled
if [ "${TONEARM_IMAGE_BINARIES:-}" = host ]; then
  step "docker-compose up -d --build with this host's release build (the Dockerfile's prebuilt stage)"
  # TONEARM_BIN_DIR: where the tested executables are (CI copies them aside while it builds others).
  bin=${TONEARM_BIN_DIR:-$(cd "$ROOT" && swift build -c release --show-bin-path)}
  for f in AudioEngine Router tonearm_TonearmRouter.resources; do
    [ -e "$bin/$f" ] || { echo "no $bin/$f: build it first (swift build -c release)"; exit 1; }
  done
  # A binary built instrumented (make test-tsan, the fuzz build) is not what the tests ran.
  if nm -D "$bin/AudioEngine" | grep -q -E '__tsan_init|__asan_init'; then
    echo "$bin/AudioEngine is instrumented by a sanitizer; build it again (make test)"; exit 1
  fi
  rm -rf "$DEPLOY/prebuilt" && mkdir -p "$DEPLOY/prebuilt/bin" "$DEPLOY/prebuilt/lib"
  cp -R "$bin/AudioEngine" "$bin/Router" "$bin/tonearm_TonearmRouter.resources" "$DEPLOY/prebuilt/bin/"
  # The Swift runtime's libraries, as the compiled stage takes them from its toolchain.
  ldd "$bin/AudioEngine" "$bin/Router" | awk '$3 ~ /\/swift\// { print $3 }' | sort -u | xargs -I{} cp {} "$DEPLOY/prebuilt/lib/"
  binaries=prebuilt
else
  step "docker-compose up -d --build (a release build of both executables, from scratch; several minutes)"
fi
started=$(date +%s)
# From a clean state as far as this machine allows: the base images stay (the offline tool built
# them), but no layer of an earlier Tonearm build is reused.
for image in "tonearm:$TONEARM_VERSION" "tonearm-https:$TONEARM_VERSION" "tonearm-hls-cache:$TONEARM_VERSION" "tonearm-discord:$TONEARM_VERSION"; do
  if [ "$podman_mode" = 1 ]; then podman rmi -f "$image" >/dev/null 2>&1 || true
  else docker rmi -f "$image" >/dev/null 2>&1 || true; fi
done
compose build --no-cache --build-arg PIP_NO_INDEX="$PIP_NO_INDEX" --build-arg TONEARM_BINARIES="$binaries" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; fail "the image did not build"; exit 1; }
ok "image built in $(( $(date +%s) - started )) s (executables: $binaries)"
if [ "$binaries" = prebuilt ] && grep -q 'swift build' "$WORK/build.log"; then
  fail "the image compiled the executables although it was handed them (the compiled stage ran)"
fi
if [ "$podman_mode" = 1 ]; then
  # podman runs health checks from systemd timers, and this machine has no systemd: run them here.
  ( while sleep 2; do for p in "$PROJECT" "$PROJECT-cluster"; do for c in $(podman ps -q --filter "label=com.docker.compose.project=$p"); do podman healthcheck run "$c" >/dev/null 2>&1 || true; done; done; done ) &
  health_loop=$!
fi
compose up -d >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "docker-compose up failed"; exit 1; }

router_health() { curl -fsS --max-time 2 "$URL/health" 2>/dev/null || true; }
wait_for() { # seconds, python condition on the health JSON `h`
  local deadline=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if router_health | python3 -c "import json,sys; h=json.load(sys.stdin); sys.exit(0 if ($2) else 1)" 2>/dev/null; then return 0; fi
    sleep 1
  done
  return 1
}

step "health"
if wait_for 120 'h["status"] == "ok" and h["engine"]["connected"]'; then ok "the Router is healthy and linked to the engine: $(router_health)"; else fail "the Router never became healthy: $(router_health)"; exit 1; fi

# Which scheduling the engine's pacer got (SCHED_FIFO needs an rtprio limit or CAP_SYS_NICE,
# which the compose file does not grant): said in its log either way.
pacer=$(compose logs engine 2>&1 | grep -o 'tonearm-pacer thread at [A-Za-z_ ]*' | head -1)
if [ -n "$pacer" ]; then ok "the engine says: $pacer"; else fail "the engine logged nothing about its pacer thread's scheduling"; fi

listen_check() { # label
  local label=$1
  code=$(curl -s -o "$WORK/play.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $BOT" \
    -H 'Content-Type: application/json' -d '{"url":"tone-440.mp3"}' "$URL/api/sessions/smoke/play")
  [ "$code" = 202 ] && ok "$label: play answered 202" || { fail "$label: play answered $code: $(cat "$WORK/play.json")"; return; }
  frames=$(python3 "$PROBE" "ws://127.0.0.1:$PORT/bot?guild=smoke&token=$BOT" record 4 "$WORK/ws.ogg" || echo 0)
  hz=$(python3 "$PROBE" tone "$WORK/ws.ogg" 2>/dev/null || echo 0)
  if [ "$frames" -ge 150 ] && [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then ok "$label: WebSocket got $frames Opus frames in 4 s, decoded to $hz Hz"
  else fail "$label: WebSocket got $frames frames, decoded to $hz Hz (expected ≥ 150 frames of 440 Hz)"; fi
  curl -s --max-time 4 "$URL/listen/smoke.ogg?token=$BOT" >"$WORK/listen.ogg" || true
  hz=$(python3 "$PROBE" tone "$WORK/listen.ogg" 2>/dev/null || echo 0)
  if [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then ok "$label: /listen Ogg stream ($(stat -c %s "$WORK/listen.ogg") bytes) decoded by ffmpeg to $hz Hz"
  else fail "$label: /listen Ogg stream decoded to $hz Hz"; fi
}

step "a tone through the API, heard over WebSocket and Ogg"
listen_check "first play"

# HTTPS checks against `name` (resolved to 127.0.0.1) on `port`, trusting the authority `ca`.
https_check() { # label port ca
  local label=$1 port=$2 ca=$3
  health=$(curl -fsS --max-time 3 --cacert "$ca" --resolve "localhost:$port:127.0.0.1" "https://localhost:$port/health" 2>&1 || true)
  echo "$health" | grep -q '"status":"ok"' && ok "$label: https://localhost:$port/health verified and answered" || fail "$label: /health over HTTPS: $health"
  frames=$(SSL_CERT_FILE=$ca python3 "$PROBE" "wss://localhost:$port/bot?guild=smoke&token=$BOT" record 4 "$WORK/wss.ogg" || echo 0)
  hz=$(python3 "$PROBE" tone "$WORK/wss.ogg" 2>/dev/null || echo 0)
  if [ "$frames" -ge 150 ] && [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then ok "$label: wss:// got $frames Opus frames in 4 s, decoded to $hz Hz"
  else fail "$label: wss:// got $frames frames, decoded to $hz Hz (expected ≥ 150 frames of 440 Hz)"; fi
  curl -s --max-time 4 --cacert "$ca" --resolve "localhost:$port:127.0.0.1" "https://localhost:$port/listen/smoke.ogg?token=$BOT" >"$WORK/https.ogg" || true
  hz=$(python3 "$PROBE" tone "$WORK/https.ogg" 2>/dev/null || echo 0)
  if [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then ok "$label: https:// Ogg stream decoded to $hz Hz"; else fail "$label: https:// Ogg stream decoded to $hz Hz"; fi
}

step "HTTPS in front: the https profile (Caddy from Debian, its own authority)"
root="$WORK/caddy-root.crt"
for _ in $(seq 60); do
  compose exec -T https cat /data/caddy/pki/authorities/local/root.crt >"$root" 2>/dev/null && [ -s "$root" ] && break
  sleep 1
done
if [ -s "$root" ]; then ok "Caddy made its authority; the client trusts only that"; https_check "Caddy" "$HTTPS_PORT" "$root"
else fail "no root certificate from Caddy: $(compose logs --tail 20 https 2>&1)"; fi
# HLS through Caddy and the cache beside it (deploy/hls-cache): a segment asked twice is the
# cache's the second time, a token in a header is never cached, and the segment is the tone.
if [ -s "$root" ]; then
  hls() { curl -s --max-time 15 --cacert "$root" --resolve "localhost:$HTTPS_PORT:127.0.0.1" "$@"; }
  base="https://localhost:$HTTPS_PORT/hls/smoke"
  segment=$(hls "$base/index.m3u8?token=$BOT" | grep -E '^[0-9]+\.m4s' | tail -1)
  if [ -n "$segment" ]; then
    first=$(hls -D - -o "$WORK/hls-segment" "$base/$segment" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-cache-status" {print $2}')
    second=$(hls -D - -o /dev/null "$base/$segment" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-cache-status" {print $2}')
    header=$(hls -D - -o /dev/null -H "Authorization: Bearer $BOT" "$base/${segment%%\?*}" | tr -d '\r' | awk -F': ' 'tolower($1)=="x-cache-status" {print $2}')
    hls -o "$WORK/hls-init" "$base/init.mp4?token=$BOT"
    cat "$WORK/hls-init" "$WORK/hls-segment" >"$WORK/hls.mp4"
    hz=$(python3 "$PROBE" tone "$WORK/hls.mp4" 2>/dev/null || echo 0)
    if [ "$first" = MISS ] && [ "$second" = HIT ] && [ "$header" = BYPASS ]; then
      ok "HLS through Caddy's cache: $segment MISS then HIT; with the token in a header, BYPASS"
    else fail "HLS cache: $segment answered $first, then $second; with a header token $header (expected MISS, HIT, BYPASS)"; fi
    if [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then ok "the HLS segment decodes to $hz Hz"; else fail "the HLS segment decoded to $hz Hz"; fi
  else fail "no segment in the HLS playlist through Caddy: $(hls "$base/index.m3u8?token=$BOT" | head -c 300)"; fi
fi
# The Router believes Caddy's X-Forwarded-For: it found the `https` service by name.
proxy_found() { compose logs router 2>&1 | grep 'trusted proxies looked up' | grep -o 'addresses=\["[^]]*\]' | tail -1; }
for _ in $(seq 30); do [ -n "$(proxy_found)" ] && break; sleep 1; done
if [ -n "$(proxy_found)" ]; then
  ok "the Router trusts Caddy by name: $(proxy_found)"
else fail "the Router never found its proxy 'https': $(compose logs --tail 20 router 2>&1)"; fi

step "restart the engine container"
connects=$(router_health | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["connects"])')
compose restart engine >/dev/null 2>&1 || fail "docker-compose restart engine failed"
if wait_for 60 "h['engine']['connected'] and h['engine']['connects'] > $connects"; then ok "the Router reconnected to the restarted engine: $(router_health)"
else fail "the Router did not reconnect: $(router_health)"; fi
state=$(curl -s -H "Authorization: Bearer $BOT" "$URL/api/sessions/smoke")
echo "$state" | grep -q '"status":"idle"' && ok "the lost play ended for its listeners (idle, not silent 'playing')" || fail "state after the restart: $state"
listen_check "after the restart"

step "the Discord bot (--profile discord) without Discord"
bridge=""
for _ in $(seq 60); do
  bridge=$(curl -s --max-time 2 "http://127.0.0.1:$BRIDGE_PORT/health" 2>/dev/null || true)
  [ -n "$bridge" ] && break
  sleep 1
done
if echo "$bridge" | grep -q '"discord_connected": false' && echo "$bridge" | grep -q 'cannot reach Discord'; then
  ok "the bot is up and its /health says why it has no Discord: $bridge"
else fail "the bot's /health: ${bridge:-no answer} ($(compose logs --tail 10 bridge 2>&1 | tail -5))"; fi
# In the running bot's container (`compose run` needs container links, which podman refuses).
if compose exec -T bridge python3 -m pytest -q -p no:cacheprovider \
    tests/test_jitter.py tests/test_bot.py >"$WORK/bridge-tests.log" 2>&1; then
  ok "the bot's offline tests pass inside its image: $(tail -1 "$WORK/bridge-tests.log")"
else fail "the bot's offline tests inside its image: $(tail -15 "$WORK/bridge-tests.log")"; fi
# tonearm-dave (the `dave` service, in the same profile): up, and the Router connected to its socket.
linked=""
for _ in $(seq 30); do
  linked=$(compose logs router 2>&1 | grep -m1 "connected to tonearm-dave" || true)
  [ -n "$linked" ] && break
  sleep 1
done
if [ -n "$linked" ]; then ok "tonearm-dave is up and the Router is connected to its socket (DAVE for its voice connections)"
else fail "the Router never connected to tonearm-dave: $(compose logs --tail 10 dave 2>&1 | tail -5)"; fi

step "the Router serving TLS itself (docker-compose.tls.yml, a certificate from a test authority)"
tls=$WORK/tls
mkdir -p "$tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=smoke authority" \
  -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" -keyout "$tls/key.pem" -out "$tls/req.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$tls/ext"
openssl x509 -req -in "$tls/req.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial -days 1 \
  -extfile "$tls/ext" -out "$tls/cert.pem" 2>/dev/null
chmod a+r "$tls"/*.pem
export TONEARM_TLS_DIR=$tls
docker-compose -p "$PROJECT" -f "$DEPLOY/docker-compose.yml" -f "$DEPLOY/docker-compose.tls.yml" up -d router >"$WORK/tls-up.log" 2>&1 \
  || { cat "$WORK/tls-up.log"; fail "docker-compose up with docker-compose.tls.yml failed"; }
tls_health() { curl -fsS --max-time 2 --cacert "$tls/ca.pem" --resolve "localhost:$PORT:127.0.0.1" "https://localhost:$PORT/health" 2>/dev/null || true; }
for _ in $(seq 60); do tls_health | grep -q '"connected":true' && break; sleep 1; done
if tls_health | grep -q '"connected":true'; then
  ok "the published port now speaks HTTPS with the mounted certificate, linked to the engine"
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $BOT" -H 'Content-Type: application/json' \
    -d '{"url":"tone-440.mp3"}' --cacert "$tls/ca.pem" --resolve "localhost:$PORT:127.0.0.1" "https://localhost:$PORT/api/sessions/smoke/play")
  [ "$code" = 202 ] && ok "play over HTTPS answered 202" || fail "play over HTTPS answered $code"
  https_check "Router TLS" "$PORT" "$tls/ca.pem"
  plain=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$PORT/health" || true)
  [ "$plain" != 200 ] && ok "plain HTTP on that port is refused ($plain)" || fail "plain HTTP still answered 200"
else
  fail "the Router did not come up with TLS: $(docker-compose -p "$PROJECT" -f "$DEPLOY/docker-compose.yml" logs --tail 20 router 2>&1)"
fi

step "graceful stop (SIGTERM, within the 10 s stop_grace_period)"
started=$(date +%s.%N)
compose stop >/dev/null 2>&1 || fail "docker-compose stop failed"
took=$(python3 -c "print(round($(date +%s.%N) - $started, 1))")
python3 -c "import sys; sys.exit(0 if $took < 10 else 1)" && ok "both stopped in $took s" || fail "stopping took $took s"
# When each service ended, counted from the stop: the services stop in reverse order of their
# dependencies (the bot and Caddy, then the Router, then the engine), so a slow one shows here.
for service in bridge dave https hls-cache router engine; do
  id=$(compose ps -q "$service" 2>/dev/null || true)
  [ -n "$id" ] || continue
  if [ "$podman_mode" = 1 ]; then finished=$(podman inspect -f '{{.State.FinishedAt}}' "$id" 2>/dev/null || true)
  else finished=$(docker inspect -f '{{.State.FinishedAt}}' "$id" 2>/dev/null || true); fi
  at=$(date -d "${finished% UTC}" +%s.%N 2>/dev/null) && at=$(python3 -c "print(round($at - $started, 1))") || at="?"
  echo "     $service ended $at s after the stop began"
done
for service in engine router hls-cache https bridge dave; do
  id=$(compose ps -q "$service")
  if [ "$podman_mode" = 1 ]; then code=$(podman inspect -f '{{.State.ExitCode}}' "$id" 2>/dev/null || echo "?")
  else code=$(docker inspect -f '{{.State.ExitCode}}' "$id" 2>/dev/null || echo "?"); fi
  [ "$code" = 0 ] && ok "$service exited 0 on SIGTERM" || fail "$service exited with $code on SIGTERM"
done

# The cluster file (about a minute more; TONEARM_SMOKE_CLUSTER=0 leaves it out). CI left it out
# from d220dcc to e1a5f53: its first listen through Caddy heard nothing in about one fresh cluster
# of three. The cause was podman's bridge changing its address as containers started (the pin
# loop above); with the address pinned, 8 fresh clusters of 8 played at once (docs/operations.md).
# When a listen fails, the Routers' logs printed below say why (`relay upstream connected late`,
# `Connect timeout`). The same failover is tested against real processes in ClusterEndToEndTests.
if [ "${TONEARM_SMOKE_CLUSTER:-1}" = 1 ]; then
step "a cluster (docker-compose.cluster.yml): three pairs on PostgreSQL behind Caddy; kill the pair playing a guild"
export TONEARM_POSTGRES_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
export TONEARM_TOKEN_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
CLUSTER_PORT=$(free_port)
CURL=http://127.0.0.1:$CLUSTER_PORT
started=$(date +%s)
if ! ccompose build postgres >"$WORK/cluster-build.log" 2>&1; then tail -20 "$WORK/cluster-build.log"; fail "the PostgreSQL image did not build"
elif ! TONEARM_PUBLISH=127.0.0.1:$CLUSTER_PORT ccompose up -d >"$WORK/cluster-up.log" 2>&1; then cat "$WORK/cluster-up.log"; fail "the cluster did not come up"
else
  ok "PostgreSQL image built and the cluster started in $(( $(date +%s) - started )) s"
  healthy=0
  for _ in $(seq 90); do
    n=0
    for r in router-a router-b router-c; do
      ccompose exec -T "$r" curl -fsS --max-time 2 http://127.0.0.1:8080/health 2>/dev/null \
        | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("cluster", {}).get("ok") else 1)' 2>/dev/null && n=$((n + 1))
    done
    [ "$n" = 3 ] && { healthy=1; break; }
    sleep 1
  done
  [ "$healthy" = 1 ] && ok "all three pairs are members (their /health says cluster ok)" || fail "not every pair joined: $(ccompose logs --tail 10 2>&1 | tail -30)"
  code=$(curl -s -o "$WORK/cplay.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $BOT" -H 'Content-Type: application/json' \
    -d '{"url":"tone-440.mp3"}' "$CURL/api/sessions/cluster-guild/play")
  [ "$code" = 202 ] && ok "play through the balancer answered 202" || fail "play through the balancer answered $code: $(cat "$WORK/cplay.json")"
  frames=$(python3 "$PROBE" "ws://127.0.0.1:$CLUSTER_PORT/bot?guild=cluster-guild&token=$BOT" record 4 "$WORK/c1.ogg" 2>"$WORK/c1.err" || echo 0)
  hz=$(python3 "$PROBE" tone "$WORK/c1.ogg" 2>/dev/null || echo 0)
  if [ "$frames" -ge 150 ] && [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then ok "the guild is heard through the balancer: $frames frames, $hz Hz"
  else
    # Twice in a dozen runs the first listen after the play heard little or nothing (cause not
    # found): say what the probe and the Routers saw.
    fail "through the balancer: $frames frames, $hz Hz; the probe: $(tail -3 "$WORK/c1.err" 2>/dev/null)"
    ccompose logs --tail 15 router-a router-b router-c balancer 2>&1 | tail -60
  fi
  owner=""
  for p in a b c; do
    ccompose exec -T "router-$p" curl -fsS --max-time 2 http://127.0.0.1:8080/health 2>/dev/null \
      | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["cluster"]["owned_sessions"] == 1 else 1)' 2>/dev/null && owner=$p
  done
  if [ -z "$owner" ]; then fail "no pair says it owns the guild"
  else
    ccompose kill engine-$owner router-$owner >/dev/null 2>&1 || fail "could not kill pair $owner"
    killed=$(date +%s.%N)
    heard=0
    for _ in $(seq 8); do
      frames=$(python3 "$PROBE" "ws://127.0.0.1:$CLUSTER_PORT/bot?guild=cluster-guild&token=$BOT" record 3 "$WORK/c2.ogg" 2>/dev/null || echo 0)
      hz=$(python3 "$PROBE" tone "$WORK/c2.ogg" 2>/dev/null || echo 0)
      if [ "$frames" -ge 100 ] && [ "$hz" -ge 435 ] && [ "$hz" -le 445 ]; then heard=1; break; fi
      sleep 0.5
    done
    took=$(python3 -c "print(round($(date +%s.%N) - $killed, 1))")
    [ "$heard" = 1 ] && ok "pair $owner killed: the guild plays again through the same address ($frames frames of $hz Hz; heard within $took s, counting the 3 s recording)" \
      || fail "pair $owner killed: the guild was not heard again ($frames frames, $hz Hz) $(ccompose logs --tail 10 2>&1 | tail -30)"
  fi
fi
ccompose down -v --remove-orphans >/dev/null 2>&1 || true

else
  step "the cluster file: skipped (TONEARM_SMOKE_CLUSTER=0)"
fi

step "summary"
if [ "$failures" -eq 0 ]; then echo "smoke test passed"; else echo "smoke test: $failures check(s) failed"; exit 1; fi
