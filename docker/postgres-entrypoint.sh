# PostgreSQL for the stack's MLflow: on first start (an empty volume) make the
# cluster with POSTGRES_USER as its superuser, POSTGRES_PASSWORD as its password
# (passed through a private file, never a command line) and the database
# POSTGRES_DB; then run the server in the foreground, reachable with a password
# (scram-sha-256) from the stack's network. Runs as the postgres user.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env (see .env.example)}"
POSTGRES_USER=${POSTGRES_USER:-mlflow}
POSTGRES_DB=${POSTGRES_DB:-mlflow}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    umask 077
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 > /dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
        | postgres --single -D "$PGDATA" -j postgres > /dev/null
    echo "postgres-entrypoint: made the database $POSTGRES_DB for $POSTGRES_USER in $PGDATA"
fi
exec postgres -D "$PGDATA"
