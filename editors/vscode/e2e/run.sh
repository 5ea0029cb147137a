#!/usr/bin/env bash
# End-to-end test of the Kina extension in a real VS Code (code-server in headless Chromium,
# driven by Playwright): installs the .vsix built from this checkout, points it at the
# project's Python environment, opens tests/fixtures/storylm0_forward.kina and checks that the
# language server starts, hovers show tensor types, a broken shape reaches the Problems
# view, Build & Validate succeeds, Show MLIR opens the module, definition and rename work
# across the two files main.kina and layers.kina and an edit of layers.kina shows main.kina's
# new error (e2e/modules.mjs), and a wrong interpreter gives a clear error.  Screenshots of each step go to artifacts/e2e/.
#
# Both workspaces are hostile: each holds its own kina_lsp/, compiler/, numpy.py,
# lsprotocol/, pygls/ and runpy.py (and the second a .venv/bin/python and workspace settings
# pointing at it), every one of which leaves a marker file when it runs.  The first is
# trusted; the second is opened in Restricted Mode by a second code-server with workspace
# trust on.  The test fails if any marker appears.
#
# Usage: bash editors/vscode/e2e/run.sh [--python PATH] [--keep]
#   --python PATH   interpreter with Kina installed (default: <repo>/.venv/bin/python)
#   --keep          keep the temporary profile/workspace for inspection
# Environment: KINA_VSCODE_E2E_HOME (harness cache, default ~/.cache/kina-vscode-e2e),
#   KINA_E2E_ARTIFACTS (default <repo>/artifacts/e2e), PORT (default: a free port).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
EXT=$(cd "$HERE/.." && pwd)
REPO=$(cd "$EXT/../.." && pwd)
PYTHON="$REPO/.venv/bin/python"; KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYTHON=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
ART=${KINA_E2E_ARTIFACTS:-$REPO/artifacts/e2e}
T0=$(date +%s)
lap() { echo "[e2e $(( $(date +%s) - T0 ))s] $*"; }

"$PYTHON" -c 'import kina_lsp' || { echo "no kina_lsp in $PYTHON: run 'make setup' or pass --python" >&2; exit 1; }

# 1. The harness (code-server + playwright-core + Chromium), cached outside the repository.
HARNESS=$(bash "$HERE/install.sh" | tail -1)
lap "harness ready in $HARNESS"

# 2. The .vsix from this checkout (npm ci only when node_modules is missing or stale).
cd "$EXT"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --audit=false --fund=false >/dev/null
fi
npm run --silent package >/dev/null
VSIX="$EXT/dist/kina.vsix"
lap "built $VSIX"

# 3. A private profile and a workspace holding a copy of the example (edits never touch the repo).
WS=$(mktemp -d /tmp/kina-e2e.XXXXXX)
mkdir -p "$WS/proj" "$WS/data/User" "$WS/xdg" "$ART"
rm -f "$ART"/*.png
cp "$REPO/tests/fixtures/storylm0_forward.kina" "$WS/proj/"
# a two-file module for the cross-file steps (e2e/modules.mjs): main.kina imports layers.kina
cp "$REPO/tests/fixtures/imports/layers.kina" "$WS/proj/"
node -e 'import("'"$HERE"'/modules.mjs").then((m) => process.stdout.write(m.MAIN))' > "$WS/proj/main.kina"
MARKERS=$WS/markers; mkdir -p "$MARKERS"
# plant DIR: Python files a workspace could use to run code in the server's process
plant() {
  for f in kina_lsp/__init__.py kina_lsp/__main__.py compiler/__init__.py compiler/oracle/validate.py \
           compiler/backend/worker_main.py numpy.py \
           lsprotocol/__init__.py pygls/__init__.py runpy.py; do
    mkdir -p "$1/$(dirname "$f")"
    printf 'open(%s, "w").write("ran")\nraise SystemExit("hostile module imported")\n' \
      "'$MARKERS/$(basename "$1")-${f//\//_}'" > "$1/$f"
  done
}
no_markers() {
  if [ -n "$(ls -A "$MARKERS")" ]; then echo "hostile workspace code ran: $(ls "$MARKERS")" >&2; exit 1; fi
  lap "no hostile workspace code ran ($1)"
}
plant "$WS/proj"
export XDG_CONFIG_HOME=$WS/xdg/config XDG_DATA_HOME=$WS/xdg/data XDG_CACHE_HOME=$WS/xdg/cache
cat > "$WS/data/User/settings.json" <<J
{ "workbench.startupEditor": "none", "workbench.tips.enabled": false, "telemetry.telemetryLevel": "off",
  "update.mode": "none", "extensions.autoCheckUpdates": false, "extensions.autoUpdate": false,
  "security.workspace.trust.enabled": false, "files.autoSave": "off", "editor.hover.delay": 200,
  "kina.server.pythonPath": "$PYTHON", "kina.diagnostics.debounceMs": 100 }
J
PORT=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
CS=(node "$HARNESS/node_modules/code-server/out/node/entry.js" --user-data-dir "$WS/data" --extensions-dir "$WS/exts")
"${CS[@]}" --install-extension "$VSIX" >/dev/null
lap "extension installed: $("${CS[@]}" --list-extensions --show-versions | tr '\n' ' ')"

# 4. code-server in its own process group, stopped (with its extension host and kina-lsp) on exit.
setsid "${CS[@]}" --bind-addr "127.0.0.1:$PORT" --auth none --disable-telemetry --disable-update-check \
  --disable-workspace-trust --disable-getting-started-override "$WS/proj" > "$WS/server.log" 2>&1 &
PID=$!
cleanup() {
  kill -TERM -- -"$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then echo "kept $WS"; else rm -rf "$WS"; fi
}
trap cleanup EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz"; do
  sleep 0.2; kill -0 "$PID" 2>/dev/null || { cat "$WS/server.log"; exit 1; }
done
lap "code-server up on port $PORT"

# 5. The browser part (drive.mjs loads playwright-core from the harness).
node "$HERE/drive.mjs" --harness "$HARNESS" \
  --url "http://127.0.0.1:$PORT/?folder=$WS/proj" --file storylm0_forward.kina --out "$ART" || { echo "--- code-server log"; tail -50 "$WS/server.log"; \
  find "$WS/data/logs" -name '*Kina*' -exec sh -c 'echo "--- $1"; tail -40 "$1"' _ {} \; ; exit 1; }
no_markers "trusted workspace"
kill -TERM -- -"$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true

# 6. Restricted Mode: a second profile with workspace trust on, and an untrusted hostile folder
#    whose workspace settings and .venv point at a hostile interpreter.  The venv's bin is put
#    on PATH for the fallback when a setting is passed over (code-server may re-read PATH from
#    a login shell; the driver accepts either outcome, both of which run nothing of the folder).
R=$WS/restricted; mkdir -p "$R/.vscode" "$R/.venv/bin" "$WS/data2/User"
cp "$REPO/tests/fixtures/storylm0_forward.kina" "$R/"
plant "$R"
printf '#!/bin/sh\necho ran > %s\nexit 3\n' "'$MARKERS/restricted-venv-python'" > "$R/.venv/bin/python"
chmod +x "$R/.venv/bin/python"
echo '{ "kina.server.pythonPath": "${workspaceFolder}/.venv/bin/python" }' > "$R/.vscode/settings.json"
cat > "$WS/data2/User/settings.json" <<J
{ "workbench.startupEditor": "none", "workbench.tips.enabled": false, "telemetry.telemetryLevel": "off",
  "update.mode": "none", "extensions.autoCheckUpdates": false, "extensions.autoUpdate": false,
  "security.workspace.trust.enabled": true, "security.workspace.trust.startupPrompt": "never",
  "security.workspace.trust.banner": "always", "files.autoSave": "off", "editor.hover.delay": 200,
  "kina.server.pythonPath": "$PYTHON", "kina.diagnostics.debounceMs": 100 }
J
CS2=(node "$HARNESS/node_modules/code-server/out/node/entry.js" --user-data-dir "$WS/data2" --extensions-dir "$WS/exts")
PATH="$(dirname "$PYTHON"):$PATH" setsid "${CS2[@]}" --bind-addr "127.0.0.1:$PORT" --auth none --disable-telemetry \
  --disable-update-check --disable-getting-started-override "$R" > "$WS/server2.log" 2>&1 &
PID=$!
until curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz"; do
  sleep 0.2; kill -0 "$PID" 2>/dev/null || { cat "$WS/server2.log"; exit 1; }
done
lap "code-server with workspace trust up on port $PORT"
node "$HERE/drive.mjs" --harness "$HARNESS" --mode restricted \
  --url "http://127.0.0.1:$PORT/?folder=$R" --file storylm0_forward.kina --out "$ART" || { echo "--- code-server log"; \
  tail -50 "$WS/server2.log"; find "$WS/data2/logs" -name '*Kina*' -exec sh -c 'echo "--- $1"; tail -40 "$1"' _ {} \; ; exit 1; }
no_markers "untrusted workspace"
lap "passed; screenshots in $ART"
