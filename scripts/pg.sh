#!/usr/bin/env bash
# A throwaway PostgreSQL 15 for the tests: `source scripts/pg.sh; pg_start` runs initdb into a temp folder, starts
# the server on a free loopback port (its socket in that folder, trust authentication, no fsync) and exports
# CODEMODE_TEST_PG_URL; `pg_stop` stops it and deletes the folder. As root the server runs as the `postgres` user,
# which PostgreSQL requires. The tests create one database each on it.
PG_BIN="${CODEMODE_PG_BIN:-/usr/lib/postgresql/15/bin}"

pg_as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
  PG_DIR="$(mktemp -d /tmp/codemode-ci-pg.XXXXXX)"
  if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$PG_DIR"; fi
  pg_as_owner "$PG_BIN/initdb" -A trust -U postgres --no-sync -E UTF8 -D "$PG_DIR/data" >"$PG_DIR/initdb.log"
  PG_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >/dev/null
  export CODEMODE_TEST_PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
  echo "throwaway PostgreSQL at $CODEMODE_TEST_PG_URL ($PG_DIR)"
}

pg_stop() {
  if [ -n "${PG_DIR:-}" ] && [ -d "$PG_DIR/data" ]; then
    pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
  fi
}
