"""Shared fixtures for the compiler tests."""
import os

import pytest

# Every build in the suite runs the toolchain (tests inspect its stages, inject its failures
# and must not read or fill the user's ~/.cache); tests/test_cache.py turns the cache on.
os.environ["KINA_CACHE"] = "0"

from compiler import build
from compiler.backend import toolchain

# Test modules that build no library (front end, formatter, language-server features, docs,
# the extension): their results do not depend on KINA_OPT_LEVEL, so the Makefile's second,
# -O2 pass deselects them (`-m "not once"`).  A module here must not build, run or validate
# compiled code, in-process or through a subprocess.
ONCE = frozenset({
    "test_architecture", "test_check", "test_format", "test_front_end", "test_fuzz", "test_goldens",
    "test_gradcheck", "test_incremental", "test_ir_verify", "test_lex", "test_parse", "test_progen", "test_vscode",
    "test_lsp_convert", "test_lsp_diagnostics", "test_lsp_language", "test_lsp_memory", "test_lsp_regressions",
    "test_lsp_robustness", "test_lsp_semantic", "test_lsp_state", "test_lsp_structure", "test_lsp_sync",
    "test_flat_chains", "test_lsp_requests", "test_lsp_scale", "test_sort_pairs", "test_vjp_export",
    "test_lsp_modules", "test_lsp_refactor", "test_grammar_cache", "test_startup",
    # a hand-written C library (no Kina build): the runtime's dynamic calls at any level
    "test_runtime_dynamic",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in ONCE:
            item.add_marker(pytest.mark.once)


@pytest.fixture(scope="module")
def hand_written_lib(tmp_path_factory):
    """Compile hand-written MLIR (with the ir.Program describing its functions) into a
    library with its manifest, as `kinac build` would: hand_written_lib(name, mlir, program)."""
    def make(name: str, mlir: str, program):
        so = tmp_path_factory.mktemp(name) / f"{name}.so"
        res = toolchain.compile_mlir(mlir, so)
        assert res.ok, res.diagnostics
        build.write_artifacts(program, so)
        return so
    return make
