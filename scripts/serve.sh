#!/usr/bin/env bash
# `make serve`: Modex in production mode on one address, HOST:PORT (default 127.0.0.1:8000), with
# WORKERS daphne processes (default 2) and the background task worker (scripts/serve.py).
#
# Before serving: `manage.py check --deploy` (refuses to start on DEBUG, a weak or missing
# DJANGO_SECRET_KEY, no DJANGO_ALLOWED_HOSTS, HTTPS settings turned off...), migrate, and
# collectstatic (hashed names, compressed copies; the workers serve /static/ themselves).
# Configure through the environment (README "Configuration" and "Scale-out"): DATABASE_URL for
# PostgreSQL and REDIS_URL for the channel layer as soon as there is more than one worker host.
# DJANGO_SECURE=false serves plain HTTP (a trial on loopback, a load test): then only errors of
# the deployment check stop the start, and DJANGO_ALLOWED_HOSTS must still be set.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
export DJANGO_SETTINGS_MODULE=modex_web.settings
export DJANGO_STATIC_MANIFEST=true

insecure=0
case "$(printf '%s' "${DJANGO_SECURE:-}" | tr '[:upper:]' '[:lower:]')" in
  false|0|no|off) insecure=1 ;;
esac
if [ "$insecure" = 1 ]; then
  if [ -z "${DJANGO_ALLOWED_HOSTS:-}" ]; then
    echo "Set DJANGO_ALLOWED_HOSTS to the host names this server answers to (e.g. 127.0.0.1,localhost)." >&2
    exit 2
  fi
  echo "DJANGO_SECURE=false: serving plain HTTP, without HSTS or secure cookies." >&2
  "$PY" manage.py check --deploy --fail-level ERROR
else
  "$PY" manage.py check --deploy --fail-level WARNING
fi
"$PY" manage.py migrate --noinput
"$PY" manage.py collectstatic --noinput --verbosity 0
exec "$PY" scripts/serve.py --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --workers "${WORKERS:-2}"
