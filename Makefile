# Two entry points on a fresh machine: `make demo` (the main job) and `make test` (every test,
# the slow end-to-end ones and those under old Python + PyTorch stacks included; the stacks are
# made once under .stacks/). Both spread the tests over every core (pytest-xdist), except the
# timings checked against a plain training loop (`serial`), which `make test` runs alone
# afterwards; `make test-fast` leaves the slow ones out.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test stacks-started bytecode test-fast test-tx2 install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# perf4sight's own modules compiled once: a process that may not write bytecode
# (PYTHONDONTWRITEBYTECODE) would compile them again at every start, and the tests start hundreds
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q src

demo: bytecode
	$(BIN)/perf4sight run --config examples/cpu_demo.ini

# The files that hold `serial` tests: the serial run collects those alone
SERIAL_FILES := $(shell grep -rl --include='*.py' 'mark.serial' tests)

# The old stacks are made in the background (tests/old_stacks.py) while .venv installs; a test
# that needs one waits for it.
test: stacks-started bytecode
	$(BIN)/python -m pytest -q -n auto --dist loadgroup -m "not serial and not tx2"
	$(BIN)/python -m pytest -q -p no:xdist -m "serial and not tx2" $(SERIAL_FILES)

stacks-started:
	mkdir -p .stacks
	$(PYTHON) tests/old_stacks.py > .stacks/made-by-make.log 2>&1 &

test-fast: bytecode
	$(BIN)/python -m pytest -q -m "not slow and not tx2" -n auto

# The optional checks on the TX2 dataset (../shared/datasets/tx2 or $PERF4SIGHT_TX2).
test-tx2: bytecode
	$(BIN)/python -m pytest -q -n auto -m tx2

clean:
	rm -rf $(VENV) out .stacks
