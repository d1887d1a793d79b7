# Two commands do everything on a fresh machine:
#   make demo   record an example job, check it, diff it against its golden, summarize it,
#               and write its HTML report to out/demo.html
#   make test   run the test suite but the frameworks group (make test-fast: the tier that records
#               nothing, ~1.5 min; make test-frameworks: TorchTitan's trainer and the frameworks
#               programs, installing the frameworks first; CI runs both)
#   make lint   ruff (lint + format check) and mypy over traceformat/ tracer/ analyzer/
#   make golden          re-record the examples and diff them against traces/ (tracer golden check)
#   make golden-update   re-record them and rewrite traces/ (tracer golden update; commit traces/)
#   make titan-matrix    record TorchTitan 0.3's own integration tests (docs/torchtitan.md's matrix)
#   make frameworks      install the frameworks tests/frameworks records (docs/frameworks.md);
#                        make test-frameworks installs them first (~2 min here)
# Each creates .venv first when needed: torch==2.13.0, then the project with its test,
# torchtitan and float8 extras (README, "Two commands": what that is and how big).
#
# TORCH_INDEX: the package index the torch line (only that line) installs from. Empty (the
# default): whatever pip is configured with; PyPI's torch 2.13.0 for Linux x86_64 is the CUDA
# build, which pulls ~20 nvidia-* packages (several GB). For PyTorch's CPU wheel on such a machine:
#   make TORCH_INDEX=https://download.pytorch.org/whl/cpu test
# It is read when .venv is made: to change it later, `rm -rf .venv` first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.commtrace-installed
FW_STAMP := $(VENV)/.frameworks-installed
TORCH_INDEX ?=

.PHONY: demo test test-frameworks test-fast lint bench golden golden-update titan-matrix clean frameworks

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0$(if $(TORCH_INDEX), --index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -c constraints-cpu.txt -e '.[test,torchtitan,float8]'
	touch $(STAMP)

# The frameworks tests/frameworks records (docs/frameworks.md), beyond the `frameworks` extra:
# - DeepSpeed: no ops built at install (DS_BUILD_OPS=0); its setup.py imports torch, so without
#   build isolation. Run it with DS_ACCELERATOR=cpu: its shm op builds with ninja on first use.
# - megatron-core: its cp311 wheel declares Python >= 3.12 (it runs on 3.11): no deps (numpy,
#   packaging, torch are here), Python requirement ignored; it imports triton (the extra).
# - torchao 0.11 for torchtune 0.6.1 (which imports APIs torchao 0.16 removed), in a folder of its
#   own: .venv keeps the float8 extra's torchao 0.18; tests/frameworks puts this folder first
#   on PYTHONPATH for the torchtune programs (by hand: PYTHONPATH=.venv/torchtune-torchao).
DEEPSPEED     := deepspeed==0.19.8
MEGATRON_CORE := megatron-core==0.19.2
TORCHTUNE_TORCHAO := torchao==0.11.0
frameworks: $(FW_STAMP)

$(FW_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints-cpu.txt -e '.[frameworks]'
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -c constraints-cpu.txt --no-build-isolation $(DEEPSPEED)
	$(BIN)/python -m pip install -q -c constraints-cpu.txt --no-deps --ignore-requires-python $(MEGATRON_CORE)
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(VENV)/torchtune-torchao $(TORCHTUNE_TORCHAO)
	touch $(FW_STAMP)

demo: $(STAMP)
	mkdir -p out
	$(BIN)/tracer record examples/hsdp_tp.toml -o out/demo.trace
	$(BIN)/analyzer check out/demo.trace
	$(BIN)/analyzer diff out/demo.trace traces/hsdp_tp.trace
	$(BIN)/analyzer summary out/demo.trace
	$(BIN)/analyzer report out/demo.trace --diff traces/hsdp_tp.trace -o out/demo.html

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not frameworks and not torchtitan"

# the frameworks group: tests marked `torchtitan` (TorchTitan's own trainer recorded, compiled,
# float8, its numerics twins: ~12 of make test's minutes before) and `frameworks` (Megatron-core,
# DeepSpeed, Accelerate / HF Trainer, Lightning, torchtune programs and their numerics twins),
# after installing the frameworks; CI runs it after `make test`
test-frameworks: $(FW_STAMP)
	$(BIN)/python -m pytest -q -m "frameworks or torchtitan"

# the fast tier (about 1.5 min): format, analysis and layering tests that record nothing
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not records"

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

# TorchTitan 0.3's own integration tests (features, models, h100), each recorded and checked:
# the matrix of docs/torchtitan.md (hours on 2 cores; bench/titan_matrix.py --help for subsets)
titan-matrix: $(STAMP)
	mkdir -p out
	$(BIN)/python bench/titan_matrix.py --json out/titan-matrix.json

clean:
	rm -rf out .pytest_cache
