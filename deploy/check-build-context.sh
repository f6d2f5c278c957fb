#!/usr/bin/env bash
# deploy/check-build-context.sh — fails within a second or two when Package.swift needs a file
# that the image's build stage does not copy (the way `docker-compose up --build` once broke:
# a target under Benchmarks/, which the Dockerfile never copies). It lays out what the build stage's
# COPY lines put in its working directory, honouring .dockerignore, and asks SwiftPM to load the
# package there (`swift package describe` checks every target's path without resolving
# dependencies). It also finds every Debian package that Package.swift's system libraries name
# (their `.apt` providers) installed in that stage, since CI puts the host's build into the image
# rather than running that stage (deploy/smoke-test.sh, TONEARM_IMAGE_BINARIES=host). `make test`
# runs it first.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DOCKERFILE=${1:-$ROOT/deploy/Dockerfile}
CONTEXT=$(mktemp -d /tmp/tonearm-context.XXXXXX)
INSTALLED=$CONTEXT.installed   # the packages the build stage's RUN lines install, one per line
trap 'rm -rf "$CONTEXT" "$INSTALLED"' EXIT

python3 - "$ROOT" "$DOCKERFILE" "$CONTEXT" "$INSTALLED" <<'PY'
import fnmatch, os, shlex, shutil, sys

root, dockerfile, context, installed = sys.argv[1:]

def instructions(path):
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text, pending = [], ""
    for line in open(path, encoding="utf-8"):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text.append(pending + stripped)
        pending = ""
    return text

def ignored_patterns():
    path = os.path.join(root, ".dockerignore")
    if not os.path.exists(path):
        return []
    lines = (l.strip() for l in open(path, encoding="utf-8"))
    return [l.rstrip("/") for l in lines if l and not l.startswith("#")]

IGNORED = ignored_patterns()

def is_ignored(relative):
    parts = relative.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pattern in IGNORED:
            if fnmatch.fnmatchcase(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pattern[3:])):
                return True
    return False

def copy(source, destination):
    relative = os.path.relpath(source, root)
    if is_ignored(relative):
        return
    if os.path.isdir(source):
        os.makedirs(destination, exist_ok=True)
        for name in sorted(os.listdir(source)):
            copy(os.path.join(source, name), os.path.join(destination, name))
    elif os.path.exists(source):
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        shutil.copy2(source, destination)
    else:
        sys.exit(f"{dockerfile}: COPY names {relative}, which does not exist")

# The build stage is the one that runs `swift build`; its COPY lines (not --from) fill WORKDIR.
stages, current = [], None
for instruction in instructions(dockerfile):
    keyword, _, rest = instruction.partition(" ")
    keyword = keyword.upper()
    if keyword == "FROM":
        current = {"copies": [], "builds": False, "workdir": "/", "runs": []}
        stages.append(current)
    elif current is None:
        continue
    elif keyword == "WORKDIR":
        current["workdir"] = os.path.join(current["workdir"], rest.strip())
    elif keyword == "COPY":
        words = shlex.split(rest)
        if not any(w.startswith("--from") for w in words):
            words = [w for w in words if not w.startswith("--")]
            current["copies"].append((current["workdir"], words[:-1], words[-1]))
    elif keyword == "RUN":
        current["runs"].append(rest)
        current["builds"] = current["builds"] or "swift build" in rest
build = [s for s in stages if s["builds"]]
if not build:
    sys.exit(f"{dockerfile}: no stage runs `swift build`")
workdir = build[0]["workdir"]
with open(installed, "w") as out:
    for run in build[0]["runs"]:
        if "apt-get" in run:
            out.writelines(w + "\n" for w in shlex.split(run.replace("&&", " ")) if not w.startswith("-"))
for copy_workdir, sources, target in build[0]["copies"]:
    target_abs = os.path.normpath(os.path.join(copy_workdir, target))
    for source in sources:
        source_abs = os.path.join(root, source)
        if os.path.isdir(source_abs) or target.endswith("/"):
            destination = target_abs if os.path.isdir(source_abs) else os.path.join(target_abs, os.path.basename(source))
        else:
            destination = target_abs
        relative = os.path.relpath(destination, workdir)
        if relative.startswith(".."):
            continue  # copied outside the working directory: not part of the package
        copy(source_abs, os.path.normpath(os.path.join(context, relative)))
PY

# TONEARM_BENCHMARKS and TONEARM_TESTABLE add targets under Benchmarks/; the image builds without them.
if ! out=$(cd "$CONTEXT" && env -u TONEARM_BENCHMARKS -u TONEARM_TESTABLE swift package describe --type json 2>&1 >/dev/null); then
  echo "deploy/check-build-context.sh: Package.swift does not load from what $(basename "$DOCKERFILE") copies into the image:" >&2
  echo "$out" >&2
  echo "Either copy the missing files in the Dockerfile's build stage or keep the target out of the default manifest." >&2
  exit 1
fi
missing=$(cd "$CONTEXT" && env -u TONEARM_BENCHMARKS -u TONEARM_TESTABLE swift package dump-package 2>/dev/null | python3 -c '
import json, sys
installed = set(open(sys.argv[1]).read().split())
for target in json.load(sys.stdin)["targets"]:
    for provider in target.get("providers") or []:
        for names in provider.get("apt", []):
            for name in names:
                if name not in installed:
                    print(target["name"], "needs", name)' "$INSTALLED")
if [ -n "$missing" ]; then
  echo "deploy/check-build-context.sh: $(basename "$DOCKERFILE")'s build stage does not install what Package.swift's system libraries need:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "build context ok: Package.swift loads from what the Dockerfile copies ($(cd "$CONTEXT" && find . -type f | wc -l) files), and its system libraries' packages are installed there"
