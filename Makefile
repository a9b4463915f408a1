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

test: $(BIN)/.installed $(JS_TESTS)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

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
