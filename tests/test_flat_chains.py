"""Flat chains of any length, end to end (issue 31): `y + y + ... + y` with 10,000 terms and
long method chains parse, check, format and run; the checker splits a long chain into lets
of CHAIN_STEP links (`chain.N`), so no stage recurses once per link."""
from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np

from compiler import cli
from compiler.analysis import analyze
from compiler.check.expr import CHAIN_STEP
from compiler.format import format_source
from compiler.ir import nodes as ir
from compiler.oracle.interp import run_function

T = "Tensor[F32, [2]]"
MAIN = f"fn main() -> {T} {{\n  f({T} {{1.0, 2.0}})\n}}\n"


def program(body: str, sizes: str = "") -> str:
    return f"fn f{sizes}(y: {T}) -> {T} {{\n  {body}\n}}\n\n" + MAIN


def ir_depth(e: ir.Expr) -> int:
    best, stack = 0, [(e, 1)]
    while stack:
        x, d = stack.pop()
        best = max(best, d)
        stack += [(c, d + 1) for c in ir.children(x)]
    return best


def checked(text: str) -> ir.Function:
    snap = analyze(text)
    assert snap.diagnostics == []
    fn = snap.program.functions["f"]
    assert max(ir_depth(e) for e in [b.value for b in fn.lets] + [fn.result]) <= CHAIN_STEP + 4   # a link itself is a few ops deep
    return fn


def test_a_10000_term_sum_checks_formats_and_runs(tmp_path: Path):
    text = program(" + ".join(["y"] * 10_000))
    fn = checked(text)
    assert len(fn.lets) == 10_000 // CHAIN_STEP - (10_000 % CHAIN_STEP == 0)
    assert all(b.names[0].startswith("chain.") for b in fn.lets)
    out = run_function(analyze(text).program, "f", [np.array([1.0, 2.0], np.float32)])
    assert np.asarray(out).tolist() == [10_000.0, 20_000.0]
    formatted = format_source(text)
    assert formatted.count("\n    + y") == 9_999 and format_source(formatted) == formatted
    path = tmp_path / "sum.kina"
    path.write_text(text)
    for args in (["check", str(path)], ["fmt", str(path)], ["run", str(path)]):
        buf = io.StringIO()
        with redirect_stdout(buf):
            assert cli.main(args) == 0, args
    assert path.read_text() == formatted and "[10000. 20000.]" in buf.getvalue()


def test_long_method_and_mixed_chains():
    checked(program("y" + ".abs()" * 3_000))
    checked(program(" - ".join(["y * 2.0 + y.abs().exp()"] * 2_000)))
    fn = checked(program("y * (" + " + ".join(["1.0"] * 5_000) + ")"))   # bare numbers still fold
    out = run_function(analyze(program("y * (" + " + ".join(["1.0"] * 5_000) + ")")).program, "f",
                       [np.array([1.0, 2.0], np.float32)])
    assert np.asarray(out).tolist() == [5_000.0, 10_000.0] and fn.lets == []


def test_errors_in_a_long_chain_are_reported_once_at_their_place():
    terms = ["y"] * 5_000
    terms[3_333] = "z"
    text = program(" + ".join(terms))
    (d,) = analyze(text).diagnostics
    assert d.code == "unknown-name" and text[d.span.start:d.span.end] == "z"
    assert d.span.start == text.index("z")


def test_a_generic_function_with_a_long_chain_of_sizes():
    text = ("fn f[N](y: Tensor[F32, [N]]) -> Tensor[F32, [N]] {\n  y * (" + " + ".join(["N"] * 2_000)
            + ")\n}\n\nfn main() -> Tensor[F32, [2]] {\n  f(Tensor[F32, [2]] {1.0, 2.0})\n}\n")
    snap = analyze(text)
    assert snap.diagnostics == []
    out = run_function(snap.program, "main", [])
    assert np.asarray(out).tolist() == [4_000.0, 8_000.0]
