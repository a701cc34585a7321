#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for the tests and prints its directory and DATABASE_URL; `stop DIR` ends it
# and removes it. `down DIR` and `up DIR` stop and start it again on the same port, keeping its data (an outage).
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
as_owner() {
  # PostgreSQL refuses to run as root.
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "${1:-start}" in
  start)
    dir=$(mktemp -d /tmp/terminals-pg.XXXXXX)
    [ "$(id -u)" -ne 0 ] || chown postgres "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
    echo "$port" >"$dir/port"
    bash "$0" up "$dir"
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres terminals
    echo "$dir postgres://postgres@127.0.0.1:$port/terminals"
    ;;
  up)
    as_owner "$bin/pg_ctl" -D "$2/data" -l "$2/log" -w \
      -o "-p $(cat "$2/port") -k $2 -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
    ;;
  down)
    as_owner "$bin/pg_ctl" -D "$2/data" -m fast -w stop >/dev/null
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$2/data" -m fast stop >/dev/null
    rm -rf "$2"
    ;;
esac
