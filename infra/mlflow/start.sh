#!/usr/bin/env bash
# Starts the team's MLflow tracking server: runs and metrics in PostgreSQL, artifacts on shared storage, served
# through the server (clients need no storage credentials of their own). Bound to 127.0.0.1 unless --host says
# otherwise.
#
#   MLFLOW_BACKEND_STORE_URI=postgresql://mlflow@127.0.0.1:5432/mlflow \
#   MLFLOW_ARTIFACTS_DESTINATION=s3://BUCKET/mlflow          (or file:///mnt/srag/mlartifacts) \
#   PGPASSWORD=...                                            (or a ~/.pgpass line; never put it in the URI) \
#     bash infra/mlflow/start.sh [--host HOST] [--port PORT] [-- EXTRA MLFLOW SERVER OPTIONS]
#
# Then point the pipeline at it: export MLFLOW_TRACKING_URI=http://HOST:PORT. Binding another address than
# loopback also needs `-- --allowed-hosts HOST:PORT` (MLflow refuses other Host headers) and a network that only the
# team reaches: the server has no login of its own. Environment: MLFLOW_WORKERS (default 4); MLFLOW the mlflow
# command (default: the repository's .venv, else the one on PATH), which needs the PostgreSQL driver psycopg
# (`pip install "psycopg[binary]"`, part of the project's dev extra).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
HOST=127.0.0.1
PORT=5000
EXTRA=()
while (($#)); do
    case "$1" in
        --host) HOST="$2"; shift 2 ;;
        --port) PORT="$2"; shift 2 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "mlflow/start.sh: error: unknown option $1 (mlflow's own options go after --)" >&2; exit 2 ;;
    esac
done

fail() { echo "mlflow/start.sh: error: $*" >&2; exit 2; }
[[ -n "${MLFLOW_BACKEND_STORE_URI:-}" ]] || fail "set MLFLOW_BACKEND_STORE_URI=postgresql://USER@HOST:PORT/DB"
[[ -n "${MLFLOW_ARTIFACTS_DESTINATION:-}" ]] || fail "set MLFLOW_ARTIFACTS_DESTINATION (s3://... or file:///shared/...)"
case "$MLFLOW_BACKEND_STORE_URI" in
    *://*:*@*) fail "keep the password out of the URI (it shows in ps): use PGPASSWORD or ~/.pgpass" ;;
    postgresql://*|postgresql+*://*) ;;
    *) fail "MLFLOW_BACKEND_STORE_URI must be a postgresql:// URI" ;;
esac

if [[ -z "${MLFLOW:-}" ]]; then
    if [[ -x "$REPO/.venv/bin/mlflow" ]]; then MLFLOW="$REPO/.venv/bin/mlflow"; else MLFLOW=mlflow; fi
fi

export MLFLOW_DISABLE_TELEMETRY=true
# The server's background job runner serves MLflow's GenAI features, which the pipeline does not use.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

exec "$MLFLOW" server \
    --host "$HOST" --port "$PORT" \
    --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
    --serve-artifacts --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION" \
    --workers "${MLFLOW_WORKERS:-4}" \
    "${EXTRA[@]}"
