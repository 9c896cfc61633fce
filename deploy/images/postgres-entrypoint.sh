#!/bin/bash
# First start: initdb with POSTGRES_USER as the superuser (password POSTGRES_PASSWORD,
# required over the network), create POSTGRES_DB; every start: run the server as the
# postgres system user, listening on every address.
set -euo pipefail
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    pwfile=$(mktemp)
    printf '%s' "$POSTGRES_PASSWORD" > "$pwfile"
    chown postgres "$pwfile"
    runuser -u postgres -- "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 > /dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != "postgres" ]; then
        echo "CREATE DATABASE \"$db\" OWNER \"$user\";" |
            runuser -u postgres -- "$bin/postgres" --single -D "$PGDATA" -j postgres > /dev/null
    fi
fi
exec runuser -u postgres -- "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
