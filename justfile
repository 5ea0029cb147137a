# Kina's recipes for `just` (installed into .venv by `make setup`: the rust-just wheel).
# Every recipe runs the Makefile target of the same name, so the commands live in one
# place (the Makefile) and `make X` and `just X` always do the same thing.
# tests/test_justfile.py fails when a Makefile target has no recipe here.
# NPROC is a recipe variable (`just NPROC=4 vocab-parallel`); make's other variables come
# from the environment (`KINA_TORCH=0 just setup`).

# list the recipes
default:
    @just --list --unsorted

# processes of the torch.distributed recipes
NPROC := env("NPROC", "2")

[private]
make target:
    make NPROC={{NPROC}} {{target}}

# set up .venv (MLIR/LLVM wheels, the C call helper, PyTorch from a local CPU wheel)
setup: (make "setup")
# the main job: build StoryLM-0, validate it against NumPy, train it
demo: (make "demo")
# the whole test suite at -O0 and -O2, the validations and the VS Code end-to-end test (what CI runs)
test: (make "test")
# the pytest suite once, at the default level
pytest: (make "pytest")
# generated programs at -O0 and -O2 against the interpreter, PyTorch, finite differences (FUZZ_N=3000)
fuzz: (make "fuzz")
# every validation script
validate: (make "validate")
# the decoder AD validation of the spec (isolated VJPs and the SGD step against NumPy and PyTorch)
validate-decoder-ad: (make "validate-decoder-ad")
# the mean-NLL step validation
validate-mean-nll: (make "validate-mean-nll")
# the 2-way vocabulary-sharded lm_head validation
validate-tp-vocab: (make "validate-tp-vocab")
# the batched MLP classifier's SGD step against NumPy and PyTorch, at -O0 and -O2
validate-mlp-classifier: (make "validate-mlp-classifier")
# the pre-norm decoder block (LayerNorm, causal mask, GELU) and its cotangents against torch.nn.functional
validate-decoder-block: (make "validate-decoder-block")
# AdamW in Kina: a 50-step trajectory against torch.optim.AdamW
validate-adamw: (make "validate-adamw")
# greedy decoding of StoryLM-0 with argmax in Kina against the demo's host loop
validate-greedy: (make "validate-greedy")
# The random examples (issue 26): sampling, dropout, init at -O0 and -O2
validate-sample: (make "validate-sample")
validate-dropout: (make "validate-dropout")
validate-init: (make "validate-init")
# StoryLM-0 data-parallel training on NPROC processes (torch.distributed)
train-ddp: (make "train-ddp")
# tensor-parallel logits and the vocab-parallel step on NPROC processes
vocab-parallel: (make "vocab-parallel")
# N = 1, 2, 4 data-parallel trajectories of StoryLM-0 and the scaled model (slow)
check-ddp: (make "check-ddp")
# the VS Code extension in code-server + headless Chromium
vscode-e2e: (make "vscode-e2e")
# regenerate examples/*.mlir
goldens: (make "goldens")
# regenerate the op tables of docs/language.md and docs/compiling.md from compiler/ir/ops.py
docs: (make "docs")
# mypy --strict on compiler/ and kina_lsp/, ruff on every Python file
lint: (make "lint")
# every benchmark script
bench: (make "bench")
# the optional benchmark peers (JAX) that bench-scaled compares against
bench-deps: (make "bench-deps")
# the scaled StoryLM against NumPy, PyTorch eager, torch.compile and jax.jit (installs bench-deps)
bench-scaled: (make "bench-scaled")
# build time against function length, a large splat literal
bench-build: (make "bench-build")
# remove .venv and build outputs
clean: (make "clean")
