#!/usr/bin/env bash
# Re-vendors asciinema-player (the recording player) for the dashboard from the npm registry (npm pack, no install):
#   bash scripts/vendor_asciinema_player.sh [VERSION]
# Its monolithic browser bundle (the WebAssembly terminal emulator is inlined in it), its stylesheet and its licence go
# to terminals/dashboard/static/dashboard/vendor/asciinema-player/, with VERSIONS naming what is there. Commit the
# result; nothing is downloaded at run or test time.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-3.18.0}"
target=terminals/dashboard/static/dashboard/vendor/asciinema-player
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "asciinema-player@$version" >/dev/null)
mkdir -p "$work/player" "$target"
tar -xzf "$work/asciinema-player-$version.tgz" -C "$work/player"
cp "$work/player/package/dist/bundle/asciinema-player.min.js" "$work/player/package/dist/bundle/asciinema-player.css" \
   "$work/player/package/LICENSE" "$target/"
printf 'asciinema-player %s\n' "$version" > "$target/VERSIONS"
echo "vendored asciinema-player $version into $target"
