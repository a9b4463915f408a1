# Two entry points: `make run` starts Helix on the embedded default, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# The embedded default is a development run; production sets SECRET_KEY and DEBUG=false.
export DEBUG ?= true

.PHONY: run test bench lint

$(BIN)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else "Helix needs Python 3.12 (see .python-version); got " + sys.version)'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

# The AI SDK the client tests under tests/js drive, as its lock file pins it.
JS_TESTS := tests/js/node_modules/.package-lock.json
$(JS_TESTS): tests/js/package.json tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
	touch $@

run: $(BIN)/.installed
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py serve

# The tests on TEST_WORKERS xdist workers, each file's on one worker and the longest files first
# (tests/conftest.py), then the tests marked `alone` by themselves; both parts run, and either
# failing fails the target. TEST_WORKERS=0 runs the first part in this process too. Exit status 5
# is pytest's "no tests selected": PYTEST_ARGS may pick tests of one part only.
TEST_WORKERS ?= 3
test: $(BIN)/.installed $(JS_TESTS)
	@status=0; \
	(set -x; $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--alone=exclude $(PYTEST_ARGS)) || [ $$? -eq 5 ] || status=1; \
	(set -x; $(BIN)/python -m pytest --alone=only $(PYTEST_ARGS)) || [ $$? -eq 5 ] || status=1; \
	exit $$status

# The peers the benchmark compares with, in a virtualenv of their own (their pins conflict).
PEERS := bench/.venv-peers
$(PEERS)/bin/.installed: bench/requirements.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet -r bench/requirements.txt
	touch $@

bench: $(BIN)/.installed $(PEERS)/bin/.installed
	$(BIN)/python -m bench

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
