#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for the tests and prints its DIR and DATABASE_URL; `stop DIR` ends it.
# `halt DIR` and `resume DIR` stop and start it again, on the same port, for outage tests.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
as_owner() {
  # PostgreSQL refuses to run as root.
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
run() {  # starts the cluster in $1 on the port it was made with
  as_owner "$bin/pg_ctl" -D "$1/data" -l "$1/log" -w \
    -o "-p $(cat "$1/port") -k $1 -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
}
case "${1:-start}" in
  start)
    dir=$(mktemp -d /tmp/terminals-pg.XXXXXX)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "$port" > "$dir/port"
    [ "$(id -u)" -ne 0 ] || chown postgres "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
    run "$dir"
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres terminals
    echo "$dir postgres://postgres@127.0.0.1:$port/terminals"
    ;;
  halt)
    as_owner "$bin/pg_ctl" -D "$2/data" -m fast stop >/dev/null
    ;;
  resume)
    run "$2"
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$2/data" -m fast stop >/dev/null 2>&1 || true  # halted already, say
    rm -rf "$2"
    ;;
esac
