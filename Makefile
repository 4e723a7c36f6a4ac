# The two commands the README gives: `make test` and `make demo`. Both bootstrap .venv, each
# with only what it needs: `make demo` the package and its `local` extra (moto's server);
# `make test` the extras and the `dev` dependency group (pyproject.toml), added to the same .venv.
# `make test` also bootstraps, under .cache: kinesalite and pyright (npm), and a venv for each
# other Python it runs the tests on (`make pythons`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Dependency groups (`pip install --group`) need pip 25.1 or newer; a new venv's pip is older.
PIP_MIN := 25.1
PIP_STAMP := $(VENV)/.pip-$(PIP_MIN)
DEV_STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo
DEV_EXTRAS := trio,otel,prometheus,local
# kinesalite, the second local Kinesis of the integration tests: an npm package, installed once
# into a cache folder (in-memory store only, so no optional native LevelDB build).
NPM ?= npm
KINESALITE_VERSION := 3.3.3
KINESALITE_DIR := .cache/kinesalite
KINESALITE_STAMP := $(KINESALITE_DIR)/.installed-$(KINESALITE_VERSION)
LINT_PATHS := src tests $(wildcard bench) docs/_hooks.py setup.py
# pyright, for `make typecompleteness`: an npm package, installed once into a cache folder like
# kinesalite. Its figure for the public API, in %, must not fall below TYPE_COMPLETENESS_MIN.
PYRIGHT_VERSION := 1.1.414
PYRIGHT_DIR := .cache/pyright
PYRIGHT_STAMP := $(PYRIGHT_DIR)/.installed-$(PYRIGHT_VERSION)
TYPE_COMPLETENESS_MIN := 100
# `make pythons`: the suite on the lowest and highest other Pythons the classifiers claim (see
# .ci/other-pythons), without coverage, each in .cache/venv-X.Y: every unit test (the command
# line's errors through its console script among them), and of the integration tests those of
# processes and signals on both backends (`aiokpl local`, the demo, a SyncProducer at exit and
# under Ctrl-C, the SIGTERM recipe of docs/shutdown.md, `put` and `tail` interrupted: what the
# interpreter's exit and its signal handling change from one Python to the next) and of HTTP to
# moto's server. Left to `make pytest` alone: the rest of `put` and `tail` end to end, the other
# servers' suites; left to `make scenarios` alone (run once, on $(PYTHON), without coverage):
# the tests marked `scenario`, fleet simulations and benchmarks' smoke runs, minutes each, whose
# code is the same on every Python. PYTHONS_PYTEST overrides the selection (`make pythons
# PYTHONS_PYTEST=tests` for all of it); the two Pythons run at once (PARALLEL=0: one after the
# other). In `make test` (its `suites` step) the lowest runs after `make checks` and `make
# scenarios`, the highest after `make pytest` (one process each, on one core each): the two
# cores stay busy to the end.
CLAIMED_PYTHONS := $(shell sed -n 's/.*"Programming Language :: Python :: \(3\.[0-9]*\)".*/\1/p' pyproject.toml)
PYTHONS_VENVS ?= .cache
PARALLEL ?= 1
PYTHONS_INTEGRATION := test_cli.py test_cli_local.py test_demo.py test_moto.py \
	test_service_shutdown.py test_sync_exit.py
# Of tests/integration/test_cli.py, only its processes under signals (by name: `interrupted`,
# `ctrl_c`), against moto's server (kinesalite adds nothing a Python changes); `-k` matches the
# package's name, `integration`, the module's and the parameters'.
PYTHONS_KEYWORDS := not (integration and test_cli.py) or ((interrupted or ctrl_c) and moto)
PYTHONS_PYTEST ?= tests -m "not scenario" \
	$(addprefix --ignore=,$(filter-out $(addprefix tests/integration/,$(PYTHONS_INTEGRATION)), \
		$(wildcard tests/integration/test_*.py))) \
	-k '$(PYTHONS_KEYWORDS)' \
	$(addprefix --deselect tests/test_docs_cli.py::,$(PYTHONS_NOT_DOCS))
# docs/cli.md holds the usage text argparse writes on make pytest's Python; 3.13's wraps it
# differently, so the page's freshness is checked there only.
PYTHONS_NOT_DOCS := test_the_page_holds_its_tables_as_the_parsers_give_them \
	test_make_docs_tables_rewrites_only_stale_pages
# `make package`: the built wheel and sdist, and the clean virtualenv the wheel is tried in.
DIST := dist
PACKAGE_VENV := .cache/package-venv

.PHONY: test checks demo lint typecheck typecompleteness pytest scenarios pythons suites kinesalite \
	pyright docs docs-tables package coverage bench fuzz clean

$(PIP_STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade 'pip>=$(PIP_MIN)'
	touch $(PIP_STAMP)

# The build's inputs: the project's metadata and the optional C decoder (setup.py), which an
# editable install compiles into src/ (a change to its source needs a new install).
BUILD_INPUTS := pyproject.toml setup.py src/aiokpl/_core/_cdecoder.c

$(DEV_STAMP): $(BUILD_INPUTS) | $(PIP_STAMP)
	$(PY) -m pip install --quiet -e '.[$(DEV_EXTRAS)]' --group dev
	touch $(DEV_STAMP)

$(DEMO_STAMP): $(BUILD_INPUTS) | $(PIP_STAMP)
	$(PY) -m pip install --quiet -e '.[local]'
	touch $(DEMO_STAMP)

# Every check: the static ones (`make checks`) and the scenarios in one lane, the suite under
# coverage in the other, then the other Pythons, one in each (`make suites`).
test: suites

checks: lint typecheck typecompleteness package docs

lint: $(DEV_STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)

typecheck: $(DEV_STAMP)
	$(PY) -m mypy

$(PYRIGHT_STAMP):
	$(NPM) install --prefix $(PYRIGHT_DIR) --no-save --no-audit --no-fund --loglevel=error \
		pyright@$(PYRIGHT_VERSION)
	touch $(PYRIGHT_STAMP)

pyright: $(PYRIGHT_STAMP)

# The public API's typing as another type checker sees it (pyright --verifytypes): every name
# exported has a known type, and the package ships py.typed as its classifier says.
typecompleteness: $(DEV_STAMP) $(PYRIGHT_STAMP)
	$(PY) tests/type_completeness.py $(PYRIGHT_DIR)/node_modules/.bin/pyright \
		$(TYPE_COMPLETENESS_MIN)

$(KINESALITE_STAMP):
	$(NPM) install --prefix $(KINESALITE_DIR) --no-save --no-audit --no-fund --omit=optional \
		--ignore-scripts --loglevel=error kinesalite@$(KINESALITE_VERSION)
	touch $(KINESALITE_STAMP)

kinesalite: $(KINESALITE_STAMP)

# The coverage floors, checked on the data of the last test run (.coverage): the pure core
# 100% line and branch (CORE_COVERAGE_MIN; exactly 100, coverage does not round up to it), the
# whole package `fail_under` in pyproject.toml (its figure when the floor was set, to two
# decimals: raise it as coverage grows). Both reports print, then the status fails if either
# is under its floor.
CORE_COVERAGE_MIN := 100
COVERAGE_FLOORS := status=0; \
	echo "--- branch coverage of the pure core (src/aiokpl/_core): floor $(CORE_COVERAGE_MIN)% ---"; \
	$(PY) -m coverage report --include='*/aiokpl/_core/*' --fail-under=$(CORE_COVERAGE_MIN) \
		|| status=1; \
	echo "--- branch coverage of the whole package: floor fail_under in pyproject.toml ---"; \
	$(PY) -m coverage report --skip-covered || status=1; \
	exit $$status

# The suite under coverage, but the scenarios, then the floors: a run that leaves code
# uncovered fails even when every test passes.
pytest: $(DEV_STAMP) $(KINESALITE_STAMP)
	$(PY) -m coverage erase
	$(PY) -m coverage run -m pytest -m "not scenario"
	@$(COVERAGE_FLOORS)

# The tests marked `scenario` (pyproject.toml), without coverage: they exercise code the rest
# of the suite covers, for minutes each.
scenarios: $(DEV_STAMP) $(KINESALITE_STAMP)
	$(PY) -m pytest -m scenario -p no:cacheprovider

# The suite on the other Pythons (the lowest and highest claimed and present).
OTHER_PYTHONS := PYTHON=$(PYTHON) VENVS=$(PYTHONS_VENVS) CLAIMED="$(CLAIMED_PYTHONS)" \
	EXTRAS=$(DEV_EXTRAS) PIP_MIN=$(PIP_MIN) PARALLEL=$(PARALLEL) .ci/other-pythons
pythons: $(KINESALITE_STAMP)
	$(OTHER_PYTHONS) $(PYTHONS_PYTEST)

# `make test`'s runs, on two lanes, one per core (.ci/other-pythons): in the foreground `make
# pytest`, its output as it goes, then the suite on the highest other Python; in the background
# `make checks` and `make scenarios` (both run, -k, whichever fails), then the suite on the
# lowest, their output when all have ended. The status fails if any of them failed. (The make
# commands through variables, not $(MAKE) in the recipe: `make -n test` then prints this step
# rather than runs it.)
PYTEST_ALONGSIDE := $(MAKE) --no-print-directory pytest
SCENARIOS_FIRST := $(MAKE) --no-print-directory -k checks scenarios
suites: $(DEV_STAMP) $(KINESALITE_STAMP)
	ALONGSIDE='$(PYTEST_ALONGSIDE)' FIRST='$(SCENARIOS_FIRST)' $(OTHER_PYTHONS) $(PYTHONS_PYTEST)

# The floors alone, on the data the last `make pytest` left.
coverage: $(DEV_STAMP)
	@$(COVERAGE_FLOORS)

docs: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

# Rewrite the tables generated from the code (Config's fields, the command line's options) in
# docs/configuration.md and docs/cli.md; the docs tests and the build fail while they are stale.
docs-tables: $(DEV_STAMP)
	$(PY) docs/_hooks.py

# What a user gets: build the sdist and, from it, the wheel (each in an isolated build
# environment, as a user's pip would); check their metadata as PyPI would (twine) and as this
# project promises (tests/package_check.py); install the wheel, no extras, into a new
# virtualenv and, outside the source tree, import it and run the command line's help.
package: $(DEV_STAMP)
	rm -rf $(DIST) $(PACKAGE_VENV)
	$(PY) -m build --outdir $(DIST) .
	$(PY) -m twine check --strict $(DIST)/*
	$(PY) tests/package_check.py metadata $(DIST)
	$(PYTHON) -m venv $(PACKAGE_VENV)
	$(PACKAGE_VENV)/bin/python -m pip install --quiet $(DIST)/*.whl
	cd $(PACKAGE_VENV) && env -u PYTHONPATH ./bin/python -I $(CURDIR)/tests/package_check.py \
		installed $(CURDIR)/$(DIST)

demo: $(DEMO_STAMP)
	$(PY) -m aiokpl demo

bench: $(DEV_STAMP)
	$(PY) -m bench

# `make fuzz`: the fuzz targets of tests/fuzz.py (the aggregate decoder, the Deduper's stored
# state, the spool's reader) fed any bytes, FUZZ_SECONDS each: coverage-guided with atheris
# (the `fuzz` dependency group) where it installs, a wheel being there for this Python, else
# with Hypothesis for the same time. Crashes are kept in .cache/fuzz. The suite runs each
# target for a moment (tests/test_fuzz.py); this is the longer run, not part of `make test`.
FUZZ_SECONDS ?= 60
fuzz: $(DEV_STAMP)
	$(PY) -m pip install --quiet --only-binary atheris --group fuzz \
		|| echo "atheris does not install here: fuzzing with Hypothesis"
	$(PY) tests/fuzz.py --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) site $(DIST) .coverage .pytest_cache .mypy_cache .ruff_cache .hypothesis \
		$(KINESALITE_DIR) $(PACKAGE_VENV) $(PYRIGHT_DIR) .cache/venv-3.* build \
		src/aiokpl/_core/_cdecoder.*.so
