"""PyTorch's (values, indices) pair (issue 26): `let (v, i) = x.topk(k) in` and
`let (v, i) = x.sort(..) in` bind the values op and its index op (argtopk / argsort) on x
computed once; `x.topk(k)` alone stays the values; a differentiated function may use the
pair; a mistake is reported once; hover shows each name's type.  Front end and
interpreter only (the ops themselves are built in tests/test_scan_ops.py)."""
import numpy as np
import pytest

from compiler.analysis import analyze
from compiler.format import format_source
from compiler.oracle.interp import run_function

PAIRS = """
fn f(x: Tensor[F32, [3, 5]]) -> (Tensor[F32, [3, 2]], Tensor[I64, [3, 2]], Tensor[F32, [3, 5]], Tensor[I64, [3, 5]], Tensor[F32, [3, 2]], Tensor[F32, [3, 2]]) {
  let (v, i) = x.topk(2) in
  let (s, order) = (x * 2.0).sort(axis=1, descending=true) in
  let (w, _) = topk(x, 2) in
  let only = x.topk(2) in
  (v, i, s, order, w, only)
}
fn loss(x: Tensor[F32, [3, 5]]) -> Tensor[F32, [3, 2]] {
  let (v, i) = x.topk(2) in
  v
}
fn step(x: Tensor[F32, [3, 5]]) -> (Tensor[F32, [3, 2]], Tensor[F32, [3, 5]]) {
  handle loss(x) with reverseMode
}
"""
X = np.array([[0.5, 2.0, -1.0, 2.0, 0.0], [3.0, 1.0, 4.0, 1.0, 5.0], [-2.0, -1.0, -3.0, 0.0, -1.0]], np.float32)


@pytest.fixture(scope="module")
def snap():
    s = analyze(PAIRS)
    assert not s.diagnostics, [d.message for d in s.diagnostics]
    return s


def test_a_pair_is_the_values_op_and_its_index_op(snap):
    lets = [(b.names, b.value.op) for b in snap.program.functions["f"].lets]
    assert lets == [(["v"], "topk"), (["i"], "argtopk"), (["chain.1"], "mul"), (["s"], "sort"),
                    (["order"], "argsort"), (["w"], "topk"), (["only"], "topk")]   # (x * 2.0) once; `_` no op


def test_the_pair_gives_values_and_indices(snap):
    v, i, s, order, w, only = run_function(snap.program, "f", [X])
    want_i = np.argsort(-X, axis=1, kind="stable")
    np.testing.assert_array_equal(i, want_i[:, :2])                # ties: the lower index first
    np.testing.assert_array_equal(v, np.take_along_axis(X, want_i[:, :2], axis=1))
    np.testing.assert_array_equal(order, want_i)
    np.testing.assert_array_equal(s, np.take_along_axis(2 * X, want_i, axis=1))
    np.testing.assert_array_equal(w, v)
    np.testing.assert_array_equal(only, v)


def test_a_differentiated_function_may_bind_the_pair(snap):
    _, g = run_function(snap.program, "step", [X])
    want = np.zeros_like(X)
    np.put_along_axis(want, np.argsort(-X, axis=1, kind="stable")[:, :2], 1.0, axis=1)
    np.testing.assert_array_equal(g, want)


def test_a_bad_pair_is_reported_once():
    s = analyze("fn f(x: Tensor[F32, [3, 5]]) -> Tensor[F32, [3, 5]] {\n"
                "  let (v, i) = x.topk(9) in\n  let (a, b) = (x + y).sort() in\n  let z = i + b in\n  x\n}\n")
    assert [d.message.split(":")[0] for d in s.diagnostics] == ["topk", "unknown name `y`"], \
        [d.message for d in s.diagnostics]
    three = analyze("fn f(x: Tensor[F32, [3, 5]]) -> Tensor[F32, [3, 5]] {\n  let (a, b, c) = x.topk(2) in\n  x\n}\n")
    assert any("not a tuple" in d.message for d in three.diagnostics)


def test_the_formatter_keeps_the_pair():
    text = "fn f(x: Tensor[F32, [3, 5]]) -> Tensor[I64, [3, 2]] {\n  let (v, i) = x.topk(2) in\n  i\n}\n"
    assert format_source(text) == text


def test_hover_names_each_half(snap):
    from kina_lsp.convert import index_of
    from kina_lsp.documents import View
    from kina_lsp.features.hover import hover
    view = View(snap, PAIRS, index_of(PAIRS))
    at = PAIRS.index("(v, i)")
    assert "v: Tensor[F32, [3, 2]" in hover(view, at + 1).contents.value
    assert "i: Tensor[I64, [3, 2]" in hover(view, at + 4).contents.value
    assert "order: Tensor[I64, [3, 5]" in hover(view, PAIRS.index("order")).contents.value
