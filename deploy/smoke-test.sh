#!/usr/bin/env bash
# deploy/smoke-test.sh — runs the real `docker-compose up -d --build` from deploy/, then checks
# as a user would, through the Router's published port on 127.0.0.1 only: health, a generated
# tone played through the API and heard over a bot WebSocket and the Ogg /listen stream, an
# engine restart the Router recovers from; then `docker-compose down -v`. Exits non-zero and says
# what failed on any failure.
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
  "$OFFLINE_TOOL" api
  for _ in $(seq 100); do answers && break; sleep 0.1; done
  answers || { echo "the podman API on $socket does not answer; see $(dirname "$socket")/api.log"; exit 1; }
  podman_mode=1
  # No PyPI inside the build here: hand the image the yt-dlp wheel from the host's pip.
  export PIP_NO_INDEX=1
fi
# The host's pip fetches the wheel (PIP_NO_INDEX applies to the image build only).
env -u PIP_NO_INDEX python3 -m pip download --quiet --no-deps --dest "$DEPLOY/wheels" "yt-dlp==2026.10.26" \
  || echo "could not download yt-dlp here; the image build will try PyPI itself"

compose() { docker-compose -p "$PROJECT" -f "$DEPLOY/docker-compose.yml" "$@"; }

cleanup() {
  step "docker-compose down -v"
  [ "$failures" -eq 0 ] || compose logs --tail 40 2>&1 | tail -80 || true
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  [ -n "${health_loop:-}" ] && kill "$health_loop" 2>/dev/null || true
  rm -rf "$WORK" "$DEPLOY"/wheels/*.whl
}
trap cleanup EXIT

# ---- configuration: a free port, a bot token, generated media --------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
BOT=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
mkdir -p "$WORK/media"
ffmpeg -nostdin -loglevel error -f lavfi -i "aevalsrc=0.5*sin(2*PI*440*t)|0.5*sin(2*PI*440*t):s=44100:d=60" "$WORK/media/tone-440.mp3"
chmod -R a+rX "$WORK"
export TONEARM_PUBLISH=127.0.0.1:$PORT TONEARM_BOT_TOKEN=$BOT TONEARM_MEDIA=$WORK/media TONEARM_VERSION=smoke
export PIP_NO_INDEX=${PIP_NO_INDEX:-}
URL=http://127.0.0.1:$PORT

step "docker-compose up -d --build (a release build of both executables, from scratch; several minutes)"
started=$(date +%s)
# From a clean state as far as this machine allows: the base images stay (the offline tool built
# them), but no layer of an earlier Tonearm build is reused.
if [ "$podman_mode" = 1 ]; then podman rmi -f "tonearm:$TONEARM_VERSION" >/dev/null 2>&1 || true
else docker rmi -f "tonearm:$TONEARM_VERSION" >/dev/null 2>&1 || true; fi
compose build --no-cache --build-arg PIP_NO_INDEX="$PIP_NO_INDEX" >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; fail "the image did not build"; exit 1; }
ok "image built in $(( $(date +%s) - started )) s"
if [ "$podman_mode" = 1 ]; then
  # podman runs health checks from systemd timers, and this machine has no systemd: run them here.
  ( while sleep 2; do for c in $(podman ps -q --filter "label=com.docker.compose.project=$PROJECT"); do podman healthcheck run "$c" >/dev/null 2>&1 || true; done; done ) &
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

step "restart the engine container"
connects=$(router_health | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["connects"])')
compose restart engine >/dev/null 2>&1 || fail "docker-compose restart engine failed"
if wait_for 60 "h['engine']['connected'] and h['engine']['connects'] > $connects"; then ok "the Router reconnected to the restarted engine: $(router_health)"
else fail "the Router did not reconnect: $(router_health)"; fi
state=$(curl -s -H "Authorization: Bearer $BOT" "$URL/api/sessions/smoke")
echo "$state" | grep -q '"status":"idle"' && ok "the lost play ended for its listeners (idle, not silent 'playing')" || fail "state after the restart: $state"
listen_check "after the restart"

step "graceful stop (SIGTERM, within the 10 s stop_grace_period)"
started=$(date +%s.%N)
compose stop >/dev/null 2>&1 || fail "docker-compose stop failed"
took=$(python3 -c "print(round($(date +%s.%N) - $started, 1))")
python3 -c "import sys; sys.exit(0 if $took < 10 else 1)" && ok "both stopped in $took s" || fail "stopping took $took s"
for service in engine router; do
  id=$(compose ps -q "$service")
  if [ "$podman_mode" = 1 ]; then code=$(podman inspect -f '{{.State.ExitCode}}' "$id" 2>/dev/null || echo "?")
  else code=$(docker inspect -f '{{.State.ExitCode}}' "$id" 2>/dev/null || echo "?"); fi
  [ "$code" = 0 ] && ok "$service exited 0 on SIGTERM" || fail "$service exited with $code on SIGTERM"
done

step "summary"
if [ "$failures" -eq 0 ]; then echo "smoke test passed"; else echo "smoke test: $failures check(s) failed"; exit 1; fi
