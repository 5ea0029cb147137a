#!/usr/bin/env bash
# Installs the end-to-end harness for the Kina extension into a cache directory OUTSIDE the repository:
# code-server 4.96.4 (= VS Code 1.96.4 on Node 20) and playwright-core, from the npm registry alone, plus
# Debian's Chromium and ripgrep.  Idempotent: a stamp keyed on this script and the lockfile makes a warm
# run take well under a second, so CI pays the ~2.5 minutes once per machine.
#
# Usage: install.sh [DIR]   (default: $KINA_VSCODE_E2E_HOME or ~/.cache/kina-vscode-e2e)
# Prints the directory on its last line.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-${KINA_VSCODE_E2E_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kina-vscode-e2e}}
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
CS="$DIR/node_modules/code-server"
KEY=$(cat "$HERE/install.sh" "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)
STAMP="$DIR/.installed-$KEY"
log() { echo "[e2e-install] $*" >&2; }
t() { local s=$(date +%s); "$@"; log "$(( $(date +%s) - s ))s: $*"; }

# 0. System packages.  ripgrep replaces @vscode/ripgrep's GitHub download; libkrb5-dev is needed to build
#    the kerberos native module; Chromium is the browser Playwright drives (no Playwright browser download).
need_apt=()
command -v rg >/dev/null || need_apt+=(ripgrep)
command -v chromium >/dev/null || need_apt+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need_apt+=(libkrb5-dev)
command -v unzip >/dev/null || need_apt+=(unzip)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { log "need root to apt-get install ${need_apt[*]}"; exit 1; }
  # A fresh machine has no package lists yet (and stale ones may 404): update, then install.
  t apt-get update -qq
  t env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [ -f "$STAMP" ] && [ -f "$CS/out/node/entry.js" ]; then log "cached in $DIR"; echo "$DIR"; exit 0; fi
rm -f "$DIR"/.installed-*

export npm_config_nodedir=/usr            # Node headers in /usr/include/node: node-gyp downloads nothing
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

# 1. code-server and playwright-core from the committed lockfile, without code-server's postinstall (it
#    would npm-install lib/vscode with a git+ssh dependency that cannot be reached).
cp "$HERE/package.json" "$HERE/package-lock.json" "$DIR/"
(cd "$DIR" && t npm ci --ignore-scripts >/dev/null)
# code-server requires argon2 at startup; build it from source (no prebuilt download).
(cd "$DIR" && t env npm_config_build_from_source=true npm rebuild argon2 >/dev/null 2>&1)

# 2. lib/vscode's own dependencies.  Its shrinkwrap pins @vscode/proxy-agent to a GitHub commit; the npm
#    tarball of @vscode/proxy-agent@0.27.0 is that same commit (same sha512 integrity), so point at it.
cd "$CS/lib/vscode"
tarball=$(npm view @vscode/proxy-agent@0.27.0 dist.tarball)
sed -i "s#\"resolved\": \"git+ssh://git@github.com/microsoft/vscode-proxy-agent.git\#0803e0a7d1249bcb64ae9d256d0ee732b7246ea5\"#\"resolved\": \"$tarball\"#" npm-shrinkwrap.json
if grep -q 'git+ssh' npm-shrinkwrap.json; then log "unexpected git dependency left in lib/vscode"; exit 1; fi
t npm install --omit=dev --ignore-scripts >/dev/null
t env npm_config_build_from_source=true npm rebuild @vscode/spdlog @vscode/deviceid native-watchdog node-pty \
  @parcel/watcher kerberos >/dev/null 2>&1
mkdir -p node_modules/@vscode/ripgrep/bin && ln -sfn "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg

# 3. The rest of code-server's postinstall.sh.
ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && ln -sfn code-linux.sh code-server)
(cd bin/helpers && ln -sfn browser-linux.sh browser.sh)
(cd extensions && t npm install --omit=dev --ignore-scripts >/dev/null && node postinstall.mjs >/dev/null)

# 4. Smoke test: every native module loads, else code-server fails later in a less readable way.
node --input-type=module -e "
import { createRequire } from 'module'; const r = createRequire(process.cwd() + '/');
for (const m of ['@vscode/spdlog','node-pty','native-watchdog','@parcel/watcher','kerberos','@vscode/deviceid']) r(m);
r('$DIR/node_modules/argon2');"
touch "$STAMP"
log "installed in $DIR"
echo "$DIR"
