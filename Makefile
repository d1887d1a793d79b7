# Two commands do everything on a fresh machine:
#   make demo   record an example job, check it, diff it against its golden, summarize it,
#               and write its HTML report to out/demo.html
#   make test   run the test suite
#   make lint   ruff (lint + format check) and mypy over traceformat/ tracer/ analyzer/
#   make golden          re-record the examples and diff them against traces/ (tracer golden check)
#   make golden-update   re-record them and rewrite traces/ (tracer golden update; commit traces/)
# Each creates .venv and installs torch==2.13.0 (CPU wheel) first when needed: an unpinned
# torch can pull a multi-GB CUDA build.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.commtrace-installed

.PHONY: demo test lint bench golden golden-update clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints-cpu.txt -e '.[test,torchtitan,float8]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out
	$(BIN)/tracer record examples/hsdp_tp.toml -o out/demo.trace
	$(BIN)/analyzer check out/demo.trace
	$(BIN)/analyzer diff out/demo.trace traces/hsdp_tp.trace
	$(BIN)/analyzer summary out/demo.trace
	$(BIN)/analyzer report out/demo.trace --diff traces/hsdp_tp.trace -o out/demo.html

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

golden: $(STAMP)
	$(BIN)/tracer golden check

golden-update: $(STAMP)
	$(BIN)/tracer golden update

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf out .pytest_cache
