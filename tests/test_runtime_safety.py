"""No library call corrupts memory, loses data or kills the caller (issues 11 and 12):
out-of-range token ids are Python exceptions (both call paths, -O0 and -O2); a rebuilt library
reloads with its new code and a manifest that does not match the library is refused; out=
arrays aliasing inputs are handled and aliasing each other refused; a process forked after a
multithreaded kernel computes instead of hanging."""
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from compiler import build
from compiler.backend import split
from compiler.oracle import interp
from compiler.runtime import library as runtime
from compiler.runtime.loader import MANIFEST_FORMAT, THREAD_POOL_SYMBOL

ROOT = Path(__file__).resolve().parent.parent
PATHS = [pytest.param(True, id="C"), pytest.param(False, id="python")]


STORYLM0 = {"B": 1, "T": 4, "H": 2, "DH": 2, "V": 8}   # examples/storylm.kina at StoryLM-0


def _build(src: Path, so: Path, level: int | None = None, sizes: dict | None = None) -> build.BuildResult:
    res = build.build_file(src, so, level, sizes=sizes)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    return res


# ---- index errors ----------------------------------------------------------------------
@pytest.fixture(scope="module", params=[0, 2], ids=["O0", "O2"])
def train_step(tmp_path_factory, request):
    d = tmp_path_factory.mktemp(f"train{request.param}")
    res = _build(ROOT / "examples" / "storylm.kina", d / "train.so", request.param, STORYLM0)
    fn = res.program.functions["train_step"]
    return res, interp.random_inputs(fn, 3, res.program)


@pytest.mark.parametrize("fastcall", PATHS)
@pytest.mark.parametrize("bad", [9, 8, -1, 2**40])
def test_a_bad_token_id_is_a_python_exception_and_the_process_lives_on(train_step, fastcall, bad):
    """Issue 11: id 9 with V = 8 aborted the whole process at the library's cf.assert."""
    res, args = train_step
    lib = runtime.load(res.so_path, fastcall=fastcall)
    window = args[0].copy()
    window[0, 3] = bad
    outs = tuple(np.full(r.shape, -7.0, r.np_dtype) for r in lib.train_step.results)
    with pytest.raises(runtime.KinaIndexError, match=rf"train_step: parameter `window` holds index {bad} "
                                                     rf"at \[0, 3\], outside \[0, 8\)"):
        lib.train_step(window, *args[1:], out=outs)
    assert all(np.all(o == -7.0) for o in outs), "the library ran despite the bad index"
    with pytest.raises(IndexError):                       # also an IndexError and a KinaArgumentError
        lib.train_step(window, *args[1:])
    with pytest.raises(runtime.KinaArgumentError):
        lib.train_step(window.tolist(), *args[1:])
    # the process, and the library, carry on
    want = interp.run_function(res.program, "train_step", args)
    for got, w in zip(lib.train_step(*args), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


def test_the_ad_step_checks_its_ids_too(tmp_path):
    res = _build(ROOT / "examples" / "storylm.kina", tmp_path / "ad.so", sizes=STORYLM0)
    lib = runtime.load(res.so_path)
    args = interp.random_inputs(res.program.functions["embedding_step"], 0, res.program)
    ids = args[0].copy()
    ids[0, 0] = 9
    with pytest.raises(runtime.KinaIndexError, match="embedding_step: parameter `token_ids` holds index 9"):
        lib.embedding_step(ids, *args[1:])


# ---- indices computed inside the library ------------------------------------------------------
COMPUTED = """
fn pick(t: Tensor[F32, [2, 4]], x: Tensor[F32, [3, 5]]) -> Tensor[F32, [3, 1, 4]] {
  let j = x.argmax(axis=1) in
  gather(t, j)
}
fn along(x: Tensor[F32, [3, 5]], y: Tensor[F32, [3, 2]]) -> Tensor[F32, [3, 1]] {
  let j = x.argmax(axis=1) in
  y.take_along_axis(j, axis=1)
}
fn outer(t: Tensor[F32, [2, 4]], x: Tensor[F32, [3, 5]], a: Tensor[F32, [128, 128]]) -> (Tensor[F32, [3, 1, 4]], Tensor[F32, [128, 128]]) {
  let g = pick(t, x) in
  (g, a @ a)
}
"""

# Run in a child: a library that still aborted (or crashed) fails the test instead of killing the run.
COMPUTED_CALLS = textwrap.dedent("""
    import sys, threading
    import numpy as np
    from compiler.runtime import library as runtime
    lib = runtime.load(sys.argv[1], fastcall=sys.argv[2] == "C")
    rng = np.random.default_rng(0)
    t, y = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    a = np.eye(128, dtype=np.float32)
    good = np.zeros((3, 5), np.float32)
    good[:, 1] = 1                      # argmax 1 in every row: inside both tables
    bad = good.copy()
    bad[1, 4] = 2                       # argmax 4 in row 1: outside [0, 2)
    cases = {"pick": ((t, good), (t, bad), lambda r: np.array_equal(r, np.broadcast_to(t[1], (3, 1, 4)))),
             "along": ((good, y), (bad, y), lambda r: np.array_equal(r, y[:, 1:2])),
             "outer": ((t, good, a), (t, bad, a), lambda r: np.array_equal(r[0][:, 0], np.broadcast_to(t[1], (3, 4)))
                                                           and np.array_equal(r[1], a))}
    for name, (ok_args, bad_args, right) in cases.items():
        try:
            lib[name](*bad_args)
            print(name, "no error")
        except runtime.KinaIndexError as e:
            print(name, "KinaIndexError:", e)
        print(name, "then", "right" if right(lib[name](*ok_args)) else "wrong")
    failures = []
    def worker(k):              # the error slot is per thread: bad calls never spoil good ones
        for i in range(200):
            try:
                r = lib.pick(t, bad if (i + k) % 2 else good)
                if (i + k) % 2 or not cases["pick"][2](r):
                    failures.append((k, i))
            except runtime.KinaIndexError:
                if not (i + k) % 2:
                    failures.append((k, i))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads: th.start()
    for th in threads: th.join()
    print("threads", "ok" if not failures else failures[:5])
""")


@pytest.fixture(scope="module", params=[(0, False), (2, False), (0, True), (2, True)],
                ids=["O0", "O2", "O0-parts", "O2-parts"])
def computed(tmp_path_factory, request):
    """The library built whole, or in parts (compiler/backend/split.py, forced by its
    threshold 0: `outer` in one part, `pick` and `along` in the other, each part's failed
    checks recording through the entry module's one error slot)."""
    level, parts = request.param
    d = tmp_path_factory.mktemp(f"computed{level}{'parts' if parts else ''}")
    (d / "c.kina").write_text(COMPUTED)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(split.SPLIT_ENV, "0" if parts else str(1 << 40))
        return _build(d / "c.kina", d / "c.so", level).so_path


@pytest.mark.parametrize("fastcall", ["C", "python"])
def test_an_index_computed_out_of_range_is_a_python_exception(computed, fastcall, tmp_path):
    """Defects item 1: an index the runtime cannot pre-check (computed by argmax inside the
    function) failed the library's cf.assert, which aborted the caller (exit 134).  Each
    index op, and a function whose callee fails, now returns an error code: KinaIndexError
    with the check's message; the next call computes; concurrent calls keep their own errors."""
    script = tmp_path / "calls.py"
    script.write_text(COMPUTED_CALLS)
    r = subprocess.run([sys.executable, str(script), str(computed), fastcall], capture_output=True, text=True,
                       timeout=240, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, f"the child died ({r.returncode}): {r.stdout}{r.stderr}"
    for name, check in [("pick", "gather"), ("along", "take_along_axis"), ("outer", "gather")]:
        assert f"{name} KinaIndexError: {name}: {check} index out of bounds" in r.stdout, r.stdout
        assert f"{name} then right" in r.stdout, r.stdout
    assert "threads ok" in r.stdout, r.stdout


def test_no_library_imports_abort(computed):
    """Every lowered bounds check records and returns (entry_points.record_failed_asserts):
    the library has no call of abort (nor the assert's puts) left."""
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(computed)], capture_output=True, text=True)
    if undefined.returncode != 0:
        pytest.skip("nm is not available")
    assert " abort" not in undefined.stdout and " puts" not in undefined.stdout, undefined.stdout


# ---- rebuild and reload ------------------------------------------------------------------
V1 = "fn f(x: Tensor[F32, [4]]) -> Tensor[F32, [4]] {\n  x + x\n}\n"
V2 = ("fn f(x: Tensor[F32, [8]]) -> (Tensor[F32, [8]], Tensor[F32, [8]]) {\n"
      "  let a = x * x in\n  let b = x + x in\n  (a, b)\n}\n")


def test_the_notebook_loop_build_load_call_edit_rebuild_load_call(tmp_path):
    """Issue 12: loading a library rebuilt at the same path ran the old code with the new
    manifest (outputs never written, or a heap overflow)."""
    src, so = tmp_path / "m.kina", tmp_path / "m.so"
    src.write_text(V1)
    _build(src, so)
    lib1 = runtime.load(so)
    np.testing.assert_array_equal(lib1.f(np.arange(4, dtype=np.float32)), [0, 2, 4, 6])
    src.write_text(V2)
    _build(src, so)
    lib2 = runtime.load(so)
    x = np.arange(8, dtype=np.float32)
    a, b = lib2.f(x)
    np.testing.assert_array_equal(a, x * x)
    np.testing.assert_array_equal(b, x + x)
    np.testing.assert_array_equal(lib1.f(np.ones(4, np.float32)), [2, 2, 2, 2])   # the old one still works
    src.write_text(V1.replace("x + x", "x * x"))
    _build(src, so)
    np.testing.assert_array_equal(runtime.load(so).f(np.full(4, 3.0, np.float32)), [9, 9, 9, 9])


def test_a_manifest_that_does_not_match_the_library_is_refused(tmp_path):
    src, so = tmp_path / "m.kina", tmp_path / "m.so"
    src.write_text(V1)
    _build(src, so)
    old_manifest = so.with_suffix(".json").read_text()
    src.write_text(V2)
    _build(src, so)
    so.with_suffix(".json").write_text(old_manifest)          # a stale manifest next to a new library
    with pytest.raises(runtime.KinaRuntimeError, match=r"manifest does not describe .*m\.so.*rebuild"):
        runtime.load(so)
    stale = json.loads(old_manifest)
    del stale["library_sha256"]
    with pytest.raises(runtime.KinaRuntimeError, match="rebuild it with `kinac build`"):
        runtime.load(so, stale)
    stale["format"], stale["library_sha256"] = 1, "0" * 64
    with pytest.raises(runtime.KinaRuntimeError, match=f"format 1, not {MANIFEST_FORMAT}"):
        runtime.load(so, stale)


def test_the_library_file_is_not_kept_open_or_copied_next_to_it(tmp_path):
    src, so = tmp_path / "m.kina", tmp_path / "m.so"
    src.write_text(V1)
    _build(src, so)
    before = sorted(p.name for p in tmp_path.iterdir())
    runtime.load(so)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    maps = Path("/proc/self/maps").read_text()
    assert str(so) not in maps, "the runtime maps a private copy, never the build output itself"


def test_a_file_that_is_not_a_library_is_a_clear_error(tmp_path):
    so = tmp_path / "junk.so"
    so.write_bytes(b"not an ELF file")
    manifest = {"format": MANIFEST_FORMAT, "library_sha256": hashlib.sha256(so.read_bytes()).hexdigest(),
                "functions": []}
    with pytest.raises(runtime.KinaRuntimeError, match=r"cannot load .*junk\.so"):
        runtime.load(so, manifest)


# ---- out= aliasing -----------------------------------------------------------------------------
ALIAS = """
fn t(x: Tensor[F32, [4, 4]]) -> Tensor[F32, [4, 4]] {
  x.transpose([1, 0])
}
fn layer(h: Tensor[F32, [4, 4]], w: Tensor[F32, [4, 4]]) -> Tensor[F32, [4, 4]] {
  h @ w
}
fn two(x: Tensor[F32, [4]]) -> (Tensor[F32, [4]], Tensor[F32, [4]]) {
  let a = x + x in
  let b = x * x in
  (a, b)
}
"""


@pytest.fixture(scope="module")
def alias_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("alias")
    (d / "alias.kina").write_text(ALIAS)
    return _build(d / "alias.kina", d / "alias.so").so_path


def _raw_call(f: runtime.KinaFunction, arrays) -> None:
    """The packed entry point with no runtime checks: what the runtime used to do."""
    d = f._descriptors
    block = (ctypes.c_int64 * (len(d.template) // 8)).from_buffer_copy(d.template)
    packed = (ctypes.c_void_p * len(arrays))()
    for i, (a, word) in enumerate(zip(arrays, d.words)):
        block[word] = block[word + 1] = a.ctypes.data
        packed[i] = ctypes.addressof(block) + 8 * word
    f._packed(packed)


X = np.arange(16, dtype=np.float32).reshape(4, 4)
W = np.full((4, 4), 0.5, np.float32) + np.eye(4, dtype=np.float32)


def test_aliased_out_gives_wrong_results_without_the_runtime(alias_path):
    """The reproduction: the library writes its output while it still reads the input."""
    lib = runtime.load(alias_path)
    h = X.copy()
    _raw_call(lib.t, (h, h))
    assert not np.array_equal(h, X.T)
    h = X.copy()
    _raw_call(lib.layer, (h, W, h))
    assert not np.allclose(h, X @ W)


@pytest.mark.parametrize("fastcall", PATHS)
def test_out_aliasing_an_input_is_computed_from_a_copy(alias_path, fastcall):
    lib = runtime.load(alias_path, fastcall=fastcall)
    h = X.copy()
    assert lib.t(h, out=h) is h
    np.testing.assert_array_equal(h, X.T)
    h = X.copy()
    lib.layer(h, W, out=h)                                   # layer(h, w, out=h)
    np.testing.assert_allclose(h, X @ W, rtol=1e-6)
    w = W.copy()
    lib.layer(X, w, out=w)
    np.testing.assert_allclose(w, X @ W, rtol=1e-6)
    v = np.arange(8, dtype=np.float32)                       # overlapping views of one buffer
    want = v[0:4] * 2
    lib.two(v[0:4], out=(v[2:6], np.empty(4, np.float32)))
    np.testing.assert_array_equal(v[2:6], want)
    big = np.zeros(32, np.float32)
    big[:16] = X.ravel()
    lib.t(big[:16].reshape(4, 4), out=big[8:24].reshape(4, 4))
    np.testing.assert_array_equal(big[8:24].reshape(4, 4), X.T)


@pytest.mark.parametrize("fastcall", PATHS)
def test_outputs_sharing_memory_are_refused(alias_path, fastcall):
    lib = runtime.load(alias_path, fastcall=fastcall)
    x = np.arange(4, dtype=np.float32)
    o = np.full(4, -1.0, np.float32)
    with pytest.raises(runtime.KinaArgumentError, match="two: out= result 0 and result 1 share memory"):
        lib.two(x, out=(o, o))
    buf = np.full(6, -1.0, np.float32)
    with pytest.raises(runtime.KinaArgumentError, match="share memory"):
        lib.two(x, out=(buf[:4], buf[2:]))
    assert np.all(o == -1.0) and np.all(buf == -1.0)
    a, b = lib.two(x, out=(buf[:4].copy(), np.empty(4, np.float32)))
    np.testing.assert_array_equal(a, 2 * x)


def test_the_c_helper_declines_aliased_outputs(alias_path):
    if not runtime.FASTCALL_AVAILABLE:
        pytest.skip("compiler.runtime._fastcall is not built")
    from compiler.runtime import _fastcall
    lib = runtime.load(alias_path)
    h = X.copy()
    assert _fastcall.call(lib.t._fast, (h, h)) == 1              # the output, not called
    np.testing.assert_array_equal(h, X)
    out = np.empty((4, 4), np.float32)
    assert _fastcall.call(lib.t._fast, (h, out)) == -1
    np.testing.assert_array_equal(out, X.T)


# ---- fork -------------------------------------------------------------------------------------
FORK_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from compiler import build, runtime
    src, so, when = sys.argv[1:4]
    res = build.build_file(src, so, 2)
    assert res.ok
    lib = runtime.load(so)
    assert lib.threaded, "the 128x128 matmul is expected to be multithreaded at -O2"
    a = np.ones((128, 128), np.float32)
    if when == "after":
        lib.mm(a, a)                                  # the thread pool starts here
    pid = os.fork()
    if pid == 0:
        try:
            r = lib.mm(a, a)
            os._exit(0 if r[0, 0] == 128 else 1)
        except runtime.KinaRuntimeError as e:
            print(e, flush=True)
            os._exit(3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("child", os.waitstatus_to_exitcode(status), flush=True)
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("child hung", flush=True)
    print("parent", lib.mm(a, a)[0, 0], flush=True)
""")

MATMUL = """
fn mm(a: Tensor[F32, [128, 128]], b: Tensor[F32, [128, 128]]) -> Tensor[F32, [128, 128]] {
  a @ b
}
"""


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_child_forked_around_a_parallel_kernel_computes(tmp_path, when):
    """Issue 12: the child of a fork after an -O2 parallel kernel hung forever on its next call
    (MLIR's async runtime threads did not survive fork).  Kernels now run on LLVM's OpenMP
    runtime, which re-creates its threads in the child: the child computes, before or after."""
    (tmp_path / "mm.kina").write_text(MATMUL)
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "mm.kina"), str(tmp_path / "mm.so"), when],
                       capture_output=True, text=True, timeout=240, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout, r.stdout + r.stderr
    assert "parent 128.0" in r.stdout


def test_serial_libraries_are_not_marked_threaded(alias_path):
    assert not runtime.load(alias_path).threaded
    from compiler.backend import threads
    assert THREAD_POOL_SYMBOL == threads.FORK_SYMBOL
