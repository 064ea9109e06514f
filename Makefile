# Modex: two commands on a fresh machine.
#   make run   set up (venv, install, migrate, a local login) and serve on 127.0.0.1:8000,
#              with the background task worker beside the server (scripts/run.sh)
#   make test  the whole test suite
PY := .venv/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test setup check clean-workspace

setup:
	@bash scripts/bootstrap.sh requirements-dev.txt
	@DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py migrate --noinput
	@DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py ensure_login

run: setup
	@HOST=$(HOST) PORT=$(PORT) bash scripts/run.sh

test:
	@bash scripts/bootstrap.sh requirements-dev.txt
	$(PY) -m pytest $(PYTEST_ARGS)

check:
	@bash scripts/bootstrap.sh requirements-dev.txt
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py check
