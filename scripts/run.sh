#!/usr/bin/env bash
# Serve Modex for `make run`: the background task workers (manage.py db_worker: Dream Engine
# consolidation, experience review, archiving, cleanup ahead of need) beside the development
# server. TASK_WORKERS workers (default 2): with two or more, the first runs only the cleanups
# ahead of need ("ahead" queue), which the next turn waits on, so they never wait for a
# consolidation or a review that is itself waiting for chat; the others run every queue. Each is
# a process of its own. The workers stop when the server does; Ctrl+C gives each 10 s to finish
# the task it is running. With MODEX_TASKS_BACKEND other than "db" no worker is needed and none
# is started.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
export DJANGO_DEBUG="${DJANGO_DEBUG:-true}"

WORKERS="${TASK_WORKERS:-2}"
case "$WORKERS" in
  ''|*[!0-9]*) echo "TASK_WORKERS must be a whole number of at least 1, got '$WORKERS'." >&2; exit 2 ;;
esac
WORKERS=$((10#$WORKERS))
if [ "$WORKERS" -lt 1 ]; then
  echo "TASK_WORKERS must be a whole number of at least 1, got '${TASK_WORKERS}'." >&2
  exit 2
fi
worker_pids=()
reaper_pid=""
interrupted=0

stop_worker() {
  [ "${#worker_pids[@]}" -gt 0 ] || return 0
  if [ -n "$reaper_pid" ]; then
    kill -TERM "$reaper_pid" 2>/dev/null || true
    wait "$reaper_pid" 2>/dev/null || true
  fi
  if [ "$interrupted" = 1 ]; then
    # Ctrl+C reached the workers too: give them time to finish their tasks and exit by themselves.
    for _ in $(seq 1 100); do
      running=0
      for pid in "${worker_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null && running=1
      done
      [ "$running" = 1 ] || break
      sleep 0.1
    done
  fi
  for pid in "${worker_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${worker_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  echo "Task workers stopped."
}
trap stop_worker EXIT
trap 'interrupted=1; exit 130' INT TERM

if [ "${MODEX_TASKS_BACKEND:-db}" = "db" ]; then
  # --no-reload: a reloading worker runs in a child process that a signal to this one would
  # orphan. Restart `make run` after changing task code.
  for n in $(seq 1 "$WORKERS"); do
    queue='*'
    if [ "$WORKERS" -ge 2 ] && [ "$n" = 1 ]; then
      queue=ahead
    fi
    "$PY" manage.py db_worker --no-reload --interval 1 --queue-name "$queue" &
    worker_pids+=("$!")
  done
  echo "Task workers started (pids ${worker_pids[*]})."
  # The reaper queues again (once) a task whose worker died mid-task (agents/task_reaper.py).
  "$PY" manage.py reap_tasks --every 60 &
  reaper_pid=$!
fi

"$PY" manage.py runserver "$HOST:$PORT"
