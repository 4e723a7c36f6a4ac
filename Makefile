# The two commands the README gives: `make test` and `make demo`. Both bootstrap .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
# kinesalite, the second local Kinesis of the integration tests: an npm package, installed once
# into a cache folder (in-memory store only, so no optional native LevelDB build).
NPM ?= npm
KINESALITE_VERSION := 3.3.3
KINESALITE_DIR := .cache/kinesalite
KINESALITE_STAMP := $(KINESALITE_DIR)/.installed-$(KINESALITE_VERSION)
LINT_PATHS := src tests $(wildcard bench) docs/_hooks.py

.PHONY: test demo lint typecheck pytest kinesalite docs coverage bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: lint typecheck pytest docs

lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)

typecheck: $(STAMP)
	$(PY) -m mypy

$(KINESALITE_STAMP):
	$(NPM) install --prefix $(KINESALITE_DIR) --no-save --no-audit --no-fund --omit=optional \
		--ignore-scripts --loglevel=error kinesalite@$(KINESALITE_VERSION)
	touch $(KINESALITE_STAMP)

kinesalite: $(KINESALITE_STAMP)

pytest: $(STAMP) $(KINESALITE_STAMP)
	$(PY) -m coverage erase
	$(PY) -m coverage run -m pytest
	@echo "--- branch coverage of the pure core (src/aiokpl/_core) ---"
	$(PY) -m coverage report --include='*/aiokpl/_core/*'
	@echo "--- branch coverage of the whole package ---"
	$(PY) -m coverage report --skip-covered

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

demo: $(STAMP)
	$(PY) -m aiokpl demo

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) site .coverage .pytest_cache .mypy_cache .ruff_cache .hypothesis $(KINESALITE_DIR)
