# Modex: two commands on a fresh machine.
#   make run   set up (venv, install, migrate, a local login) and serve on 127.0.0.1:8000,
#              with the background task worker beside the server (scripts/run.sh)
#   make test  the whole test suite
#   make serve production: WORKERS daphne processes on HOST:PORT plus the task worker, after
#              check --deploy, migrate and collectstatic (scripts/serve.sh; README "Scale-out")
PY := .venv/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
WORKERS ?= 2

.PHONY: run test setup check clean-workspace bench serve manage

setup:
	@bash scripts/bootstrap.sh requirements-dev.txt
	@DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py migrate --noinput
	@DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py ensure_login

run: setup
	@HOST=$(HOST) PORT=$(PORT) bash scripts/run.sh

serve:
	@bash scripts/bootstrap.sh requirements.txt
	@HOST=$(HOST) PORT=$(PORT) WORKERS=$(WORKERS) bash scripts/serve.sh

test:
	@bash scripts/bootstrap.sh requirements-dev.txt
	$(PY) -m pytest $(PYTEST_ARGS)

# Any manage.py command with the same local defaults as make run, e.g.
#   make manage ARGS="dream --full"    make manage ARGS="changepassword admin"
manage:
	@DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py $(ARGS)

check:
	@bash scripts/bootstrap.sh requirements-dev.txt
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py check

# Side-by-side benchmarks (benchmarks/run.py): a separate .venv-bench with the app's pins plus the
# peers of benchmarks/requirements.txt; writes benchmarks/results/latest.md and latest.json.
# BENCH_QUICK=1 for smaller sizes; BENCH_ARGS="--only trim,store" for some workloads.
bench:
	@bash benchmarks/bootstrap.sh
	.venv-bench/bin/python -m benchmarks.run $(BENCH_ARGS)
