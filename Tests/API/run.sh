#!/usr/bin/env bash
# Tests/API/run.sh — schemathesis against the real binaries: starts the engine and the Router
# (release builds from TONEARM_BIN_DIR) on free ports with a tone in a media folder, runs every
# operation of the Router's OpenAPI document (served at /openapi.json), then of the engine's
# (docs/engine-openapi.json) against the engine's control port, with all of schemathesis' checks
# (server errors, undocumented statuses, answers outside their schemas, malformed input accepted,
# valid input refused; the two .toml files here say which refusals are intended), then checks
# that both processes are still running, and stops them. `/listen` is left out: its answer is an
# endless Ogg stream; so is the engine's `/search`: without a network every search is yt-dlp
# timing out. ST_SEED picks the run (default 1, so CI repeats it).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${TONEARM_BIN_DIR:-$(swift build -c release --show-bin-path)}
command -v st >/dev/null || export PATH=$HOME/.local/bin:$PATH  # pip's --user scripts
work=$(mktemp -d /tmp/tonearm-api.XXXXXX)
# N free ports, all held at once while they are chosen: two ports chosen one after the other can
# be the same one (CI at 9b0df55: the engine and the Router both given 50023, the engine's bind refused).
free_ports() { python3 -c 'import socket, sys; s = [socket.socket() for _ in range(int(sys.argv[1]))]; [x.bind(("127.0.0.1", 0)) for x in s]; print(*[x.getsockname()[1] for x in s])' "$1"; }
mkdir -p "$work/media" "$work/data"
ffmpeg -nostdin -loglevel error -y -f lavfi -i "sine=f=440:d=5" "$work/media/tone-440.mp3"
export TONEARM_SOCKET=$work/engine.sock TONEARM_MEDIA_DIR=$work/media TONEARM_DATA_DIR=$work/data
read -r TONEARM_ENGINE_PORT TONEARM_ROUTER_PORT < <(free_ports 2)
export TONEARM_ENGINE_PORT TONEARM_ROUTER_PORT
export TONEARM_ENGINE_URL=http://127.0.0.1:$TONEARM_ENGINE_PORT
export TONEARM_BOT_TOKEN=api-test-$RANDOM$RANDOM
"$bin/AudioEngine" > "$work/engine.log" 2>&1 & engine=$!
"$bin/Router" > "$work/router.log" 2>&1 & router=$!
trap 'kill $engine $router 2>/dev/null; wait $engine $router 2>/dev/null; rm -rf "$work"' EXIT
base=http://127.0.0.1:$TONEARM_ROUTER_PORT
for _ in $(seq 100); do
  curl -fs "$base/health" 2>/dev/null | grep -q '"connected":true' && break
  sleep 0.2
done
curl -fs "$base/health" | grep -q '"connected":true' || { echo "the Router never linked to the engine"; cat "$work"/*.log; exit 1; }
status=0
st --config-file Tests/API/schemathesis.toml run "$base/openapi.json" --checks all \
  --exclude-operation-id listen --seed "${ST_SEED:-1}" --no-color || status=$?
st --config-file Tests/API/engine-schemathesis.toml run docs/engine-openapi.json --url "$TONEARM_ENGINE_URL" \
  --checks all --exclude-operation-id search --seed "${ST_SEED:-1}" --no-color || status=$?
for name in engine router; do
  pid=${!name}
  kill -0 "$pid" 2>/dev/null || { echo "the $name exited during the run"; tail -20 "$work/$name.log"; status=1; }
done
exit $status
