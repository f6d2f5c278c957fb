#!/bin/sh
# Makes the database on first start (user `tonearm`, password TONEARM_POSTGRES_PASSWORD, reached
# from the compose network with scram-sha-256), then runs the server in the foreground; SIGTERM
# is its smart shutdown, SIGINT its fast one.
set -eu
: "${TONEARM_POSTGRES_PASSWORD:?set TONEARM_POSTGRES_PASSWORD}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\n' "$TONEARM_POSTGRES_PASSWORD" > /tmp/pw
  initdb -D "$PGDATA" -U tonearm --pwfile=/tmp/pw --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
  rm -f /tmp/pw
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "host all all ::/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
