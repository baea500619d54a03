#!/usr/bin/env bash
# Start a throwaway PostgreSQL on loopback for the tests and print the DSN to use.
# Usage: eval "$(bash .ci/postgres.sh)"   (needs root: installs Debian's postgresql if absent)
set -euo pipefail
PORT="${FORGETTING_PG_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGDATA=$(mktemp -d /tmp/forgetting-pg.XXXXXX)
chown postgres "$PGDATA"
runuser -u postgres -- "$PGBIN/initdb" -D "$PGDATA" -A trust -U postgres >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -w -l "$PGDATA/server.log" \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $PGDATA -c fsync=on" start >/dev/null
runuser -u postgres -- "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres forgetting_test
echo "export FORGETTING_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:$PORT/forgetting_test"
echo "export FORGETTING_PG_STOP='runuser -u postgres -- $PGBIN/pg_ctl -D $PGDATA -m fast stop'"
