"""A large module compiles in parts side by side (compiler/backend/split.py, parts.py): each
export in exactly one part, what it calls copied in as internal functions, text the cut does
not recognise compiled whole; and a library built in parts computes what the library built
whole computes, bit for bit.  (Failed bounds checks in parts: tests/test_runtime_safety.py.)"""
import os
import re
import subprocess

import numpy as np
import pytest

from compiler import build
from compiler.backend import split, toolchain
from compiler.oracle import interp
from compiler.runtime import library as runtime

# `scaled` and `shifted` both call the generic `dense` (at two sizes) and `mix`; `dense` and
# `mix` are exports too, so each is in one part as an export and copied where it is called.
PROGRAM = """
fn dense[M, K, N](x: Tensor[F32, [M, K]], w: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] {
  let y = x @ w in
  let t = y.tanh() in
  t
}
fn mix(a: Tensor[F32, [4, 8]], b: Tensor[F32, [4, 8]]) -> Tensor[F32, [4, 8]] {
  let p = a * b in
  let q = p + a in
  q
}
fn scaled(x: Tensor[F32, [4, 6]], w: Tensor[F32, [6, 8]], v: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {
  let h = dense(x, w) in
  let g = dense(h, v) in
  let o = mix(g, h) in
  o
}
fn shifted(x: Tensor[F32, [4, 6]], w: Tensor[F32, [6, 8]], ids: Tensor[I64, [3]]) -> Tensor[F32, [3, 8]] {
  let h = dense(x, w) in
  let m = mix(h, h) in
  gather(m, ids)
}
fn grads(x: Tensor[F32, [4, 6]], w: Tensor[F32, [6, 8]], v: Tensor[F32, [8, 8]])
    -> (Tensor[F32, [4, 8]], Tensor[F32, [4, 6]], Tensor[F32, [6, 8]], Tensor[F32, [8, 8]]) {
  handle scaled(x, w, v) with reverseMode
}
"""


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    src = tmp_path_factory.mktemp("split") / "p.kina"
    src.write_text(PROGRAM)
    res = build.BuildResult(False)
    text = build.front_end(PROGRAM, str(src), {}, res)
    assert text, res.diagnostics
    return src, text


def _exports(text: str) -> list[str]:
    return re.findall(r"^  func\.func @(kina_\w+)\(", text, re.M)


def test_each_export_is_in_one_part_and_its_callees_are_internal_copies(emitted, monkeypatch):
    _, text = emitted
    monkeypatch.setenv(split.SPLIT_ENV, "0")
    parts = split.split_module(text)
    assert parts is not None and len(parts) == 2
    exported = [name for part in parts for name in _exports(part)]
    assert sorted(exported) == sorted(_exports(text)) == sorted(
        f"kina_{f}" for f in ("dense", "mix", "scaled", "shifted", "grads"))
    abi = re.findall(r"// kina-abi: (kina_\w+)", "".join(parts))
    assert sorted(abi) == sorted(exported), "an ABI comment is the export's, in its part only"
    for part in parts:
        items = split.parse_items(part)
        assert items is not None
        names = {item.name for item in items[1]}
        for item in items[1]:
            assert item.calls <= names, f"{item.name} calls outside its part"
            if item.private and item.lines[-1].startswith("  }"):
                assert split.INTERNAL in "\n".join(item.lines), item.name


def test_what_the_cut_does_not_recognise_or_need_is_one_part(emitted, monkeypatch):
    _, text = emitted
    monkeypatch.setenv(split.SPLIT_ENV, str(len(text) + 1))
    assert split.split_module(text) is None, "below the threshold"
    monkeypatch.setenv(split.SPLIT_ENV, "0")
    assert split.split_module(text.replace("module {", "module attributes {x} {")) is None
    assert split.split_module(text.replace("\n  func.func @kina_mix", "\n  %0 = arith.constant 0 : i32\n"
                                           "  func.func @kina_mix")) is None
    one = "module {\n  func.func @kina_f() -> () attributes {llvm.emit_c_interface} {\n    return\n  }\n}\n"
    assert split.split_module(one) is None, "one export: nothing to share"
    monkeypatch.delenv(split.SPLIT_ENV)
    monkeypatch.setattr(split, "SPLIT_MIN_BYTES", 0)
    if len(os.sched_getaffinity(0)) >= split.PARTS:
        assert split.split_module(text, "tools") is not None
    assert split.split_module(text, "engine") is None, "-O2 builds whole unless KINA_SPLIT_BYTES asks"
    if len(os.sched_getaffinity(0)) >= split.PARTS:     # ... or the process builds again
        assert split.split_module(text, "engine", rebuilding=True) is not None


@pytest.mark.parametrize("level", [0, 2])
def test_a_library_built_in_parts_computes_what_the_whole_one_does(emitted, tmp_path, monkeypatch, level):
    src, _ = emitted
    libs = {}
    for name, threshold in (("whole", str(1 << 40)), ("parts", "0")):
        monkeypatch.setenv(split.SPLIT_ENV, threshold)
        with monkeypatch.context() as m:
            if name == "parts":   # each part has its pass list: the whole module's is never made
                m.setattr(toolchain, "passes_for", _not_in_parts)
            res = build.build_file(src, tmp_path / f"{name}.so", level)
        assert res.ok, res.diagnostics
        libs[name] = (res, runtime.load(res.so_path))
    program = libs["whole"][0].program
    for fn in ("scaled", "shifted", "grads", "mix"):
        args = list(interp.random_inputs(program.functions[fn], 7, program))
        if fn == "shifted":
            args[2] = np.array([3, 0, 2], np.int64)
        got = [np.atleast_1d(r) for r in _tuple(libs["parts"][1][fn](*args))]
        want = [np.atleast_1d(r) for r in _tuple(libs["whole"][1][fn](*args))]
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), fn
    x, w, _ = interp.random_inputs(program.functions["shifted"], 7, program)
    with pytest.raises(runtime.KinaIndexError, match="shifted"):
        libs["parts"][1].shifted(x, w, np.array([3, 4, 0], np.int64))
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(libs["parts"][0].so_path)],
                             capture_output=True, text=True)
    if symbols.returncode == 0:   # the shared error recorder is the library's own
        assert "_kina_fail" not in symbols.stdout and "_kina_packed_kina_grads" in symbols.stdout


def _not_in_parts(*args, **kwargs):
    raise AssertionError("compile_mlir made the whole module's pass list for a build in parts")


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)
