"""-O2 libraries' heap buffers (compiler/backend/alloc_cache.py): freed blocks are reused by the
next call, small ones go back to malloc, the cache has a bound, -O0 keeps malloc."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np

from compiler import build
from compiler.backend import alloc_cache
from compiler.runtime import library as runtime

# Two [256, 512] intermediates (512 KiB each, heap buffers) between input and output.
PROGRAM = """
fn f(x: Tensor[F32, [256, 512]], y: Tensor[F32, [256, 512]]) -> Tensor[F32, [256, 512]] {
  let a = x.log_softmax(axis=1) in
  let b = y.log_softmax(axis=1) in
  a * b + a
}
"""


def _build(tmp_path, level: int):
    src = tmp_path / "p.kina"
    src.write_text(PROGRAM)
    res = build.build_file(src, tmp_path / f"p{level}.so", level, cache=False)
    assert res.ok, res.diagnostics
    return res.so_path


def _symbols(so) -> str:
    return subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True).stdout


def test_O2_libraries_define_the_cache_and_O0_ones_call_malloc(tmp_path):
    assert "T _mlir_memref_to_llvm_alloc" in _symbols(_build(tmp_path, 2))
    assert "_mlir_memref_to_llvm_alloc" not in _symbols(_build(tmp_path, 0))


def test_a_freed_block_is_reused_by_an_allocation_of_its_size(tmp_path):
    lib = ctypes.CDLL(str(_build(tmp_path, 2)))
    alloc, free = lib._mlir_memref_to_llvm_alloc, lib._mlir_memref_to_llvm_free
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.argtypes = [ctypes.c_void_p]
    big = alloc_cache.MIN_CACHED * 4
    p = alloc(big)
    ctypes.memset(p, 1, big)
    free(p)
    assert alloc(big) == p                       # the same block, no fresh pages
    q = alloc(big + 4)                           # another size: another block
    assert q not in (None, p)
    free(q)
    free(p)
    assert alloc(big) == p and alloc(big) != p   # one cached block of that size: taken once


def test_every_block_starts_on_a_cache_line(tmp_path):
    """64-byte aligned, small and large: malloc's 16 put a large buffer's rows 16 bytes into a
    line, so every vector load and store of a row crossed two (products 4-9% slower)."""
    lib = ctypes.CDLL(str(_build(tmp_path, 2)))
    alloc, free = lib._mlir_memref_to_llvm_alloc, lib._mlir_memref_to_llvm_free
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.argtypes = [ctypes.c_void_p]
    blocks = [alloc(n) for n in (1, 24, 64, 1000, alloc_cache.MIN_CACHED, 16 << 20)]
    assert [b % 64 for b in blocks] == [0] * len(blocks)
    for b in blocks:
        free(b)
    assert alloc(16 << 20) % 64 == 0             # a cached block too


def test_results_match_O0_and_memory_stays_flat_over_calls(tmp_path):
    o0, o2 = runtime.load(_build(tmp_path, 0)), runtime.load(_build(tmp_path, 2))
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((256, 512)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(o2.f(x, y), o0.f(x, y), rtol=1e-5, atol=1e-5)
    out = np.empty((256, 512), np.float32)
    for _ in range(20):
        o2.f(x, y, out=out)
    before = _rss_kib()
    for _ in range(300):
        o2.f(x, y, out=out)
    assert _rss_kib() - before < 2048


def test_the_cache_is_bounded_and_a_zero_limit_turns_it_off(tmp_path):
    so = _build(tmp_path, 2)
    script = ("import ctypes, sys\n"
              "lib = ctypes.CDLL(sys.argv[1])\n"
              "a, f = lib._mlir_memref_to_llvm_alloc, lib._mlir_memref_to_llvm_free\n"
              "a.restype, a.argtypes, f.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]\n"
              "lib.kina_alloc_cache_bytes.restype = ctypes.c_size_t\n"
              "blocks = [a(1 << 20) for _ in range(8)]\n"
              "for b in blocks: f(b)\n"
              "print(lib.kina_alloc_cache_bytes() >> 20)\n")
    held = {}
    for limit in ("0", "3", "1024"):
        env = dict(os.environ, KINA_ALLOC_CACHE_MB=limit)
        proc = subprocess.run([sys.executable, "-c", script, str(so)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        held[limit] = int(proc.stdout)
    assert held == {"0": 0, "3": 3, "1024": 8}


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def test_the_runtime_object_is_compiled_once_and_kept_beside_the_build_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KINA_CACHE_DIR", str(tmp_path / "builds"))
    first = alloc_cache.runtime_object(tmp_path)
    assert first.parent == tmp_path / "builds" / ".runtime" and first.is_file()
    stamp = first.stat().st_mtime_ns
    assert alloc_cache.runtime_object(tmp_path) == first and first.stat().st_mtime_ns == stamp
    from compiler.backend import cache
    assert cache.evict(tmp_path / "builds", 0) == 0 and first.is_file()   # eviction leaves it alone
