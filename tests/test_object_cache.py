"""The -O2 LLVM stage's object cache (compiler/backend/llvm_stage.py `llvm_object`, keys in
compiler/backend/cache.py `object_key`): with the build cache on, the lowered module is cut
into parts by the hash of each function's name and each part's object is stored; a rebuild
after an edit of one function compiles only the parts whose bitcode changed, and the
library is as right as one built from nothing."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.backend import cache, llvm_stage
from compiler.runtime import library as runtime

pytest.importorskip("mlir.ir", reason="the -O2 back end needs the MLIR Python bindings")

# Six exported functions: the module is cut into parts, and an edit of `f5` leaves the
# parts without it as they were.
FUNCTIONS = [f"fn f{k}(x: Tensor[F32, [4, 8]]) -> Tensor[F32, [4, 8]] {{\n  let y = x * {k + 1}.5 in\n"
             f"  let z = exp(y) + x in\n  z\n}}\n" for k in range(6)]
SRC = "\n".join(FUNCTIONS)
EDITED = SRC.replace("x * 6.5", "x * 7.5")   # the same length: the same cut along the exports


@pytest.fixture
def root(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("KINA_CACHE", "1")
    monkeypatch.setenv("KINA_CACHE_DIR", str(d))
    monkeypatch.setenv("KINA_LLVM_SPLIT_BYTES", "0")     # a small module cut into parts too
    return d


def _objects(root: Path) -> set[str]:
    return {d.name for d in root.iterdir() if (d / cache.OBJECT).exists()} if root.exists() else set()


def _build(tmp_path: Path, text: str, name: str, **kw) -> build.BuildResult:
    src = tmp_path / f"{name}.kina"
    src.write_text(text)
    res = build.build_file(src, tmp_path / "out" / f"{name}.so", 2, **kw)
    assert res.ok, res.diagnostics
    return res


def _check(res: build.BuildResult, scale6: float) -> None:
    lib = runtime.load(res.so_path)
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    for k in range(6):
        scale = scale6 if k == 5 else k + 1.5
        np.testing.assert_allclose(getattr(lib, f"f{k}")(x), np.exp(x * np.float32(scale)) + x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mlir_parts", [False, True])
def test_an_edit_of_one_function_compiles_only_its_part(tmp_path, root, monkeypatch, mlir_parts):
    """mlir_parts: the emitted module is first cut along its exports (compiler/backend/split.py),
    each MLIR part's LLVM stage then cut and cached in its turn."""
    if mlir_parts:
        monkeypatch.setenv("KINA_SPLIT_BYTES", "0")
    first = _build(tmp_path, SRC, "a")
    stored = _objects(root)
    assert len(stored) >= 2, "the module was not cut into parts"
    _check(first, 6.5)
    second = _build(tmp_path, EDITED, "b")
    assert not second.cached                               # the library is new
    new = _objects(root) - stored
    assert 1 <= len(new) < len(stored), (len(new), len(stored))   # the parts without f5 were reused
    print(f"{len(stored)} objects stored, {len(new)} after the edit")
    _check(second, 7.5)
    third = _build(tmp_path, SRC, "c", cache=True)       # back as it was: the library itself is a hit
    assert third.cached and _objects(root) == stored | new


def test_cached_objects_are_found_again_when_the_library_is_gone(tmp_path, root):
    _build(tmp_path, SRC, "a")
    stored = _objects(root)
    for d in root.iterdir():                              # the libraries go, the objects stay
        if (d / cache.LIBRARY).exists():
            cache._remove(d)
    again = _build(tmp_path, SRC, "b")
    assert not again.cached and _objects(root) == stored  # every part was a hit: nothing new stored
    _check(again, 6.5)


def test_a_damaged_object_is_a_miss_and_the_library_is_right(tmp_path, root):
    _build(tmp_path, SRC, "a")
    for name in _objects(root):
        obj = root / name / cache.OBJECT
        obj.write_bytes(b"\0" * obj.stat().st_size)     # same size, wrong bytes: the SHA-256 tells
    _check(_build(tmp_path, EDITED, "b"), 7.5)
    _check(_build(tmp_path, SRC, "c", cache=False), 6.5)


def test_no_objects_without_the_cache(tmp_path, root):
    _check(_build(tmp_path, SRC, "a", cache=False), 6.5)
    assert _objects(root) == set()


def test_an_entry_names_only_its_own_files(tmp_path, root):
    """A meta.json that names another file (damaged, or written by hand) is a miss, never a read."""
    obj = tmp_path / "x.o"
    obj.write_bytes(b"object")
    entry = cache.store("k", obj, root=root, file=cache.OBJECT)
    assert entry is not None and cache.lookup("k", root) is not None
    meta = json.loads((root / "k" / "meta.json").read_text())
    (root / "k" / "meta.json").write_text(json.dumps({**meta, "file": "../../x.o"}))
    assert cache.lookup("k", root) is None


def test_the_object_key_follows_the_bitcode_and_the_tools_arguments():
    salt = cache.object_salt(["-O2"], ["-O2", "-filetype=obj"])
    base = cache.object_key(salt, b"bitcode")
    assert cache.object_key(salt, b"bitcode") == base
    assert cache.object_key(salt, b"bitcodf") != base
    assert cache.object_key(cache.object_salt(["-O3"], ["-O2", "-filetype=obj"]), b"bitcode") != base
    assert cache.object_key(cache.object_salt(["-O2"], ["-O2", "-filetype=asm"]), b"bitcode") != base


@pytest.mark.parametrize("size,cached,parts", [(10, True, 1), (250_000, False, llvm_stage.LLVM_PARTS),
                                               (250_000, True, 4), (810_000, True, 12), (5_000_000, True, 12)])
def test_part_count(size, cached, parts, monkeypatch):
    monkeypatch.delenv("KINA_LLVM_SPLIT_BYTES", raising=False)
    monkeypatch.setattr(llvm_stage, "min_bytes", lambda var, default, n: default)   # a machine of 2 cores or more
    assert llvm_stage._part_count(size, cached) == parts


def test_moved_code_misses_the_library_but_finds_every_object(tmp_path, root):
    """The emitted MLIR carries source lines (its locations); the bitcode does not."""
    _build(tmp_path, SRC, "a")
    stored = _objects(root)
    moved = _build(tmp_path, "// a new first line\n\n" + SRC, "b")
    assert not moved.cached and _objects(root) == stored
    _check(moved, 6.5)
