# Two commands matter: `make run` (the product on its embedded SQLite default) and
# `make test` (the whole suite). Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
JOBS ?= 2
# Both cores: each xdist worker is its own process with its own test database. loadgroup
# spreads tests as load does, but keeps an xdist_group's tests on one worker (the MCP
# gateway's live server is set up once a pass, not once a worker).
PARALLEL := -n $(JOBS) --dist loadgroup --durations=25

.PHONY: run demo test check lint clean docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[django]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed-run

# Development mode, asked for explicitly: DEBUG on, loopback only (a default start has DEBUG off).
run: $(VENV)/.installed-run
	KEELGATE_DEBUG=1 $(BIN)/python manage.py keelgate_serve

demo: $(VENV)/.installed-run
	$(BIN)/python demo/crash_and_reconcile.py

# The whole suite on the embedded SQLite default, then the Django suite again on
# PostgreSQL: required when CI=true, skipped with a message on a laptop without it.
# Each pass prints its 25 slowest tests.
test: $(VENV)/.installed-dev
	@echo "== the engine and the site on SQLite =="
	$(BIN)/python -m pytest $(PARALLEL) $(PYTEST_ARGS)
	@echo "== LangGraph's checkpointer conformance suite on KeelgateSaver (pass counts) =="
	$(BIN)/python -m tests.contrib.langgraph.conformance
	@echo "== the console in a real browser (Chromium, Daphne and a worker as subprocesses) =="
	$(BIN)/python -m pytest tests/browser --durations=25 $(PYTEST_ARGS)
	@echo "== docs/deploy.md's topology (PostgreSQL, Redis, two Daphne, two workers, notify) in Chromium =="
	$(BIN)/python -m pytest tests/deploy --durations=5 $(PYTEST_ARGS)
	@if $(BIN)/python -c "import psycopg; psycopg.connect('$(PG_URL)', connect_timeout=3).close()" 2>/dev/null; then \
	  echo "== the Django suite on PostgreSQL =="; \
	  DATABASE_URL=$(PG_URL) $(BIN)/python -m pytest tests/site $(PARALLEL) $(PYTEST_ARGS); \
	elif [ "$$CI" = "true" ]; then \
	  echo "PostgreSQL at $(PG_URL) is required when CI=true"; exit 1; \
	else \
	  echo "PostgreSQL is not reachable at $(PG_URL): the PostgreSQL pass was skipped"; \
	fi

# The inner loop: lint, then the engine and the site on SQLite (no browser, no PostgreSQL).
check: lint
	$(BIN)/python -m pytest -n $(JOBS) --dist loadgroup -q $(PYTEST_ARGS)

# ruff, mypy (strict, django-stubs) on the engine and the apps, and the layering contracts.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $@ $(VENV)/.installed-run

# The documentation site (mkdocs.yml) into site/ (git-ignored). --strict: a broken link, a
# missing reference, or a setting, command, error, audit kind or dependency the generated
# reference cannot describe (docs/_hooks/reference.py) fails the build.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Benchmarks against LangGraph and the disk's floor (bench/README.md): prints a table and
# writes bench/results/latest.json. QUICK=1 is the two-minute pass. Never run by `make test`.
.PHONY: bench
bench:
	@$(BIN)/python -c "import langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres, django, psycopg" 2>/dev/null \
	  || $(MAKE) $(VENV)/.installed-bench
	QUICK=$(QUICK) BENCH_PG_URL=$(PG_URL) $(BIN)/python -m bench

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev,langgraph]"
	touch $@
