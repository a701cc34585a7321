#!/usr/bin/env bash
# Re-vendors xterm.js and its fit addon for the dashboard from the npm registry (npm pack, no install):
#   bash scripts/vendor_xterm.sh [XTERM_VERSION] [FIT_VERSION]
# Their dist files and licences go to terminals/dashboard/static/dashboard/vendor/, with VERSIONS naming what is
# there. Commit the result; nothing is downloaded at run or test time.
set -euo pipefail
cd "$(dirname "$0")/.."
xterm="${1:-6.0.0}"
fit="${2:-0.11.0}"
target=terminals/dashboard/static/dashboard/vendor
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@xterm/xterm@$xterm" "@xterm/addon-fit@$fit" >/dev/null)
mkdir -p "$work/xterm" "$work/fit" "$target/xterm"
tar -xzf "$work/xterm-xterm-$xterm.tgz" -C "$work/xterm"
tar -xzf "$work/xterm-addon-fit-$fit.tgz" -C "$work/fit"
cp "$work/xterm/package/lib/xterm.js" "$work/xterm/package/css/xterm.css" "$target/xterm/"
cp "$work/xterm/package/LICENSE" "$target/xterm/LICENSE"
cp "$work/fit/package/lib/addon-fit.js" "$target/xterm/"
cp "$work/fit/package/LICENSE" "$target/xterm/LICENSE.addon-fit"
printf '@xterm/xterm %s\n@xterm/addon-fit %s\n' "$xterm" "$fit" > "$target/xterm/VERSIONS"
echo "vendored @xterm/xterm $xterm and @xterm/addon-fit $fit into $target/xterm"
