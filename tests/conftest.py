"""Shared fixtures for the compiler tests."""
import os

import pytest

# Every build in the suite runs the toolchain (tests inspect its stages, inject its failures
# and must not read or fill the user's ~/.cache); tests/test_cache.py turns the cache on.
os.environ["KINA_CACHE"] = "0"

from compiler import build
from compiler.backend import toolchain


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
