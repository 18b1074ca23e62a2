# Entrypoint of the stack's images: refuse to start with a secret still at its
# .env.example placeholder (change-me...), naming the variable, then run the
# command. `docker compose up --wait` then fails on that service, and
# `docker compose logs SERVICE` says which variable to set.
for name in POSTGRES_PASSWORD MLFLOW_TRACKING_PASSWORD MLFLOW_AUTH_ADMIN_PASSWORD \
            MLFLOW_FLASK_SERVER_SECRET_KEY RAY_AUTH_TOKEN; do
    eval "value=\${$name:-}"
    case "$value" in
        change-me*)
            echo "$name is still the placeholder of .env.example ($value): set it in .env (see .env.example)" >&2
            exit 78 ;;
    esac
done
exec "$@"
