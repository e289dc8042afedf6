#!/bin/sh
# Initialise $PGDATA on first start (as the official image does), then run Postgres as the
# postgres user in the foreground.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
mkdir -p "$PGDATA" /run/postgresql
chown -R postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp) && printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile" && chown postgres "$pwfile"
    as_postgres initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth=scram-sha-256 \
        --encoding=UTF8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    as_postgres pg_ctl -w -o "-c listen_addresses=''" start >/dev/null
    if [ "$POSTGRES_DB" != "postgres" ]; then
        PGPASSWORD=$POSTGRES_PASSWORD as_postgres psql -q -h /run/postgresql \
            -U "$POSTGRES_USER" -d postgres -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    as_postgres pg_ctl -w -m fast stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups \
    postgres -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
