"""The build cache (compiler/backend/cache.py): a rebuild of the same program with the same options
reuses the library; anything that changes the library changes the key; entries are
checked, bounded and written atomically; the cache never fails a build."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.backend import cache, toolchain
from compiler.runtime import library as runtime

SRC = "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] {\n  let y = x * x in\n  y\n}\n"
OTHER = "fn f(x: Tensor[F32, [3]]) -> Tensor[F32, [3]] {\n  let y = x + x in\n  y\n}\n"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def root(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("KINA_CACHE", "1")
    monkeypatch.setenv("KINA_CACHE_DIR", str(d))
    return d


def _build(tmp_path: Path, text: str, name: str = "a", level: int = 0, **kw) -> build.BuildResult:
    src = tmp_path / f"{name}.kina"
    src.write_text(text)
    timings: dict = {}
    res = build.build_file(src, tmp_path / "out" / f"{name}.so", level, timings, **kw)
    assert res.ok, res.diagnostics
    res.timings = timings
    return res


def _entries(root: Path, file: str = cache.LIBRARY) -> list[Path]:
    """The cache's entries holding a library (file=cache.OBJECT: an -O2 part's object)."""
    if not root.exists():
        return []
    return [d for d in root.iterdir() if not d.name.startswith(".") and (d / file).exists()]


def test_second_build_is_a_hit_and_the_library_works(tmp_path, root):
    first = _build(tmp_path, SRC)
    assert not first.cached and "mlir-opt" in first.timings and len(_entries(root)) == 1
    (tmp_path / "out" / "a.so").unlink()
    second = _build(tmp_path, SRC)
    assert second.cached and "mlir-opt" not in second.timings
    assert json.loads(second.manifest_path.read_text())["functions"][0]["name"] == "f"
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(runtime.load(second.so_path).f(x), x * x)


def test_the_key_follows_program_and_options_not_the_file_name(tmp_path, root):
    _build(tmp_path, SRC, "a")
    assert _build(tmp_path, SRC, "renamed").cached          # same program, another file
    assert not _build(tmp_path, OTHER, "b").cached          # another program
    assert not _build(tmp_path, SRC, "a", level=2).cached   # another level
    assert len(_entries(root)) == 3


def test_the_key_changes_with_compiler_toolchain_and_host(monkeypatch):
    mlir = "module {}"
    base = cache.key_for(mlir, 0, "settings")
    assert cache.key_for(mlir, 0, "settings") == base
    assert cache.key_for(mlir, 0, "other settings") != base
    for fn in ("compiler_fingerprint", "toolchain_fingerprint", "host_fingerprint"):
        with monkeypatch.context() as m:
            m.setattr(cache, fn, lambda: "something else")
            assert cache.key_for(mlir, 0, "settings") != base, fn


@pytest.mark.parametrize("var,value", [("KINA_OPENMP", "0"), ("KINA_VECTOR_MATH", "0"), ("KINA_FUSE", "0")])
def test_serial_or_scalar_kernels_are_a_different_key(monkeypatch, var, value):
    from compiler.backend import llvm_stage, threads
    if var == "KINA_OPENMP" and threads.openmp_library() is None or var == "KINA_VECTOR_MATH" and not llvm_stage.vector_math():
        pytest.skip(f"{var} changes nothing on this machine")
    base = toolchain.build_settings()
    monkeypatch.setenv(var, value)
    assert toolchain.build_settings() != base


def test_a_different_cc_is_a_different_key(tmp_path, monkeypatch):
    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\nexec cc \"$@\"\n")
    cc.chmod(0o755)
    base = cache.key_for("module {}", 0)
    monkeypatch.setenv("KINA_CC", str(cc))
    assert cache.key_for("module {}", 0) != base


def test_disabled_by_env_and_by_flag(tmp_path, root, monkeypatch, capsys):
    monkeypatch.setenv("KINA_CACHE", "0")
    _build(tmp_path, SRC)
    assert _entries(root) == []
    monkeypatch.setenv("KINA_CACHE", "1")
    _build(tmp_path, SRC, cache=False)
    assert _entries(root) == []
    _build(tmp_path, SRC)
    from compiler import cli
    src = tmp_path / "a.kina"
    assert cli.main(["build", str(src), "-O0", "-o", str(tmp_path / "c.so")]) == 0
    assert "from the build cache" in capsys.readouterr().out
    assert cli.main(["build", str(src), "-O0", "--no-cache", "-o", str(tmp_path / "c.so")]) == 0
    assert "from the build cache" not in capsys.readouterr().out


def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path, root):
    _build(tmp_path, SRC)
    [entry] = _entries(root)
    (entry / "lib.so").write_bytes(b"not a library")
    again = _build(tmp_path, SRC)
    assert not again.cached
    assert _build(tmp_path, SRC).cached


@pytest.mark.parametrize("level", [0, 2])
def test_unusable_cache_dir_never_fails_a_build(tmp_path, monkeypatch, level):
    """Nor at -O2, whose LLVM stage looks up and stores its parts' objects there too."""
    if level == 2:
        pytest.importorskip("mlir.ir", reason="the -O2 back end needs the MLIR Python bindings")
        monkeypatch.setenv("KINA_LLVM_SPLIT_BYTES", "0")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KINA_CACHE", "1")
    monkeypatch.setenv("KINA_CACHE_DIR", str(blocker / "sub"))   # cannot be created
    assert not _build(tmp_path, SRC, level=level).cached
    assert not _build(tmp_path, SRC, level=level).cached


def test_eviction_keeps_the_most_recently_used(tmp_path, root, monkeypatch):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"x" * 1000)
    for i, key in enumerate(("k1", "k2", "k3")):
        assert cache.store(key, lib, root=root) is not None
        os.utime(root / key / "meta.json", (1000 + i, 1000 + i))
    assert cache.lookup("k1", root) is not None        # a hit refreshes k1
    assert cache.evict(root, 2500) == 1                 # k2 is now the least recently used
    assert sorted(d.name for d in _entries(root)) == ["k1", "k3"]


def test_store_twice_keeps_one_entry(tmp_path, root):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"abc")
    first = cache.store("k", lib, root=root)
    second = cache.store("k", lib, root=root)
    assert first and second and second.meta["sha256"] == first.meta["sha256"]
    assert [d.name for d in root.iterdir()] == ["k"]


CONCURRENT = r"""
import sys
sys.path.insert(0, sys.argv[1])
from compiler import build
res = build.build_file(sys.argv[2], sys.argv[3], 0)
print("ok" if res.ok else "failed")
"""


def test_concurrent_builds_of_one_program(tmp_path, root):
    src = tmp_path / "a.kina"
    src.write_text(SRC)
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(ROOT), str(src), str(tmp_path / f"o{i}.so")],
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(3)]
    assert [p.communicate(timeout=300)[0].strip() for p in procs] == ["ok"] * 3
    assert len(_entries(root)) == 1
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for i in range(3):
        np.testing.assert_array_equal(runtime.load(tmp_path / f"o{i}.so").f(x), x * x)


def _count_workers(monkeypatch) -> list[int]:
    from compiler.backend import worker as backend_worker
    started: list[int] = []
    real = backend_worker.Worker

    class Counting(real):
        def __init__(self) -> None:
            started.append(1)
            super().__init__()

    monkeypatch.setattr(backend_worker, "Worker", Counting)
    return started


def test_a_hit_at_O2_starts_no_backend_worker(tmp_path, root, monkeypatch):
    """The -O2 worker is started before the front end (its MLIR import overlaps it); the
    source hint tells a build that will hit not to start it (it once spawned and ended a
    worker on every hit, ~0.25 s of CPU)."""
    started = _count_workers(monkeypatch)
    first = _build(tmp_path, SRC, level=2)
    assert not first.cached and len(started) == 1
    second = _build(tmp_path, SRC, level=2)
    assert second.cached and len(started) == 1
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(runtime.load(second.so_path).f(x), x * x)
    # the hint follows the source text: another program starts a worker again
    assert not _build(tmp_path, OTHER, level=2).cached and len(started) == 2


def test_a_stale_hint_only_costs_the_worker(tmp_path, root, monkeypatch):
    """A hint whose entry is gone (evicted, damaged): the build starts no worker ahead,
    misses, and builds (its worker started when needed); the hint is then renewed."""
    started = _count_workers(monkeypatch)
    _build(tmp_path, SRC, level=2)
    for d in _entries(root):
        (d / "lib.so").write_bytes(b"damaged")
    again = _build(tmp_path, SRC, level=2)
    assert not again.cached and len(started) == 2      # started by the toolchain, not ahead
    assert _build(tmp_path, SRC, level=2).cached and len(started) == 2
    hints = list((root / ".sources").iterdir())
    assert len(hints) == 1 and cache.lookup(hints[0].read_text()) is not None


def test_a_hit_only_touches_its_hint(tmp_path, root):
    """A hit's hint already names its key: it is kept as recently used, not rewritten
    (a rewrite also listed the whole hint directory on every build)."""
    _build(tmp_path, SRC, level=0)
    (hint,) = (root / ".sources").iterdir()
    os.utime(hint, (1_000_000, 1_000_000))
    inode, key = hint.stat().st_ino, hint.read_text()
    assert _build(tmp_path, SRC, level=0).cached
    assert hint.stat().st_ino == inode and hint.read_text() == key and hint.stat().st_mtime > 1_000_000


FAKE_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Fake CPU @ 2.00GHz
flags\t\t: fpu sse2 avx2 avx512f avx512bw
bugs\t\t: spectre_v1

processor\t: 1
model name\t: Fake CPU @ 2.00GHz
flags\t\t: fpu sse2 avx2 avx512f avx512bw
"""


def test_the_host_cpu_is_its_first_model_and_flags_lines_and_whether_it_has_avx512f(tmp_path):
    from compiler.backend import host
    cpu = host.parse_cpuinfo(FAKE_CPUINFO)
    assert cpu.lines == "model name\t: Fake CPU @ 2.00GHz\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"
    assert cpu.has_avx512f
    assert not host.parse_cpuinfo(FAKE_CPUINFO.replace(" avx512f", "")).has_avx512f
    assert not host.parse_cpuinfo("vmx flags\t: avx512f\nflags\t\t: fpu avx2\n").has_avx512f, "a flags line only"
    arm = host.parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd0c\n")
    assert arm == host.Cpu("Features\t: fp asimd sve\n", False)
    path = tmp_path / "cpuinfo"
    path.write_text(FAKE_CPUINFO)
    assert host.host_cpu(str(path)) == cpu
    assert host.host_cpu(str(tmp_path / "absent")) == host.Cpu("", False)


def test_the_host_fingerprint_and_tile_read_the_cpu_as_they_did():
    """The key's host part is what cache.host_fingerprint wrote before compiler/backend/host.py
    (an unchanged CPU keeps its cache entries), and the register tile's AVX-512 test too."""
    import platform

    from compiler.backend import transform_library
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    first_core = text.split("\n\n")[0].splitlines()
    cpu = "".join(line + "\n" for line in first_core if line.startswith(("model name", "flags", "Features")))
    assert cache.host_fingerprint() == f"{platform.system()} {platform.machine()}\n{cpu}"
    avx512f = any(line.startswith("flags") and " avx512f" in line for line in text.splitlines())
    assert transform_library._host_has_avx512() is avx512f
