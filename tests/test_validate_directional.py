"""`kinac validate`'s default gradient check (compiler/oracle/directional.py): central
differences along random directions.  A VJP wrong in ONE element of one gradient by 1e-3
fails it (and `--exhaustive`), whatever the seed; a right one passes."""
import io
import time

import numpy as np
import pytest

from compiler import analysis
from compiler.ad import vjp
from compiler.core import progress
from compiler.oracle import directional, gradients, interp, kinks, validate

SOURCE = """
fn f(x: Tensor[F32, [4, 3]], w: Tensor[F32, [3, 5]], b: Tensor[F32, [5]]) -> Tensor[F32, [4, 1]] {
  let y = x @ w in
  let b2 = b.reshape([1, 5]) in
  let bb = b2.broadcast([4, 5]) in
  let z = y + bb in
  let t = z.tanh() in
  let s = t.reduce_keep(op=sum, axis=1) in
  s
}
fn f_grads(x: Tensor[F32, [4, 3]], w: Tensor[F32, [3, 5]], b: Tensor[F32, [5]])
    -> (Tensor[F32, [4, 1]], Tensor[F32, [4, 3]], Tensor[F32, [3, 5]], Tensor[F32, [5]]) {
  let r = handle f(x, w, b) with reverseMode in
  r
}
"""
OFF = 1e-3     # the planted error
AT = 3         # in element 3 of d/d b


def _planted_reshape_vjp(monkeypatch):
    """reshape's VJP with OFF added to element AT of its cotangent: d/d b (b is reshaped
    once) is then wrong in that one element, in the interpreter and the library alike."""
    row = vjp.VJPS["reshape"]

    def wrong(b, node, y, g, needs):
        (ct,) = row.rule(b, node, y, g, needs)
        t = ct.tensor_type
        plant = b.literal(t, tuple(OFF if i == AT else 0.0 for i in range(int(np.prod(t.shape)))))
        return [b.emit("add", [ct, plant])]
    monkeypatch.setitem(vjp.VJPS, "reshape", vjp.VJP(wrong))


def _grads64(program, args):
    return interp.run_function(program, "f_grads", args, dtype=np.float64)[1:]


def test_a_wrong_element_fails_the_directional_check_at_every_seed(monkeypatch):
    """Interpreter only (no build): 20 seeds, the right cotangents pass, the planted one fails
    and is named (`d/d b`), never another parameter."""
    program = analysis.analyze(SOURCE).program
    args = interp.random_inputs(program.functions["f"], 0, program)
    right = _grads64(program, args)
    _planted_reshape_vjp(monkeypatch)
    wrong = _grads64(program, args)
    diff = np.abs(wrong[2] - right[2])
    assert diff[AT] == pytest.approx(OFF) and np.delete(diff, AT).max() == 0.0
    assert all(np.array_equal(a, b) for a, b in zip(wrong[:2], right[:2]))
    for seed in range(20):
        ok = directional.check_gradients(program, "f", args, right, 0.0, seed)
        assert [c.name for c in ok] == ["d/d x, w, b"] and ok[0].ok, seed
        bad = directional.check_gradients(program, "f", args, wrong, 0.0, seed)
        assert [c.name for c in bad if not c.ok] == ["d/d b"], (seed, bad)


def test_directions_through_kinks_are_split_and_only_the_coordinates_on_one_skipped(monkeypatch):
    """tests/test_validate_kinks.py's inputs: 7 coordinates sit on a kink (x[0], x[2], the
    x[4] = y[4] tie, y[1], the u[0] = u[1] argmax tie); every direction is split until each
    is alone, and the rest is checked.  Under the rule before kinks.py (every difference a
    derivative) the same directions fail."""
    from test_validate_kinks import KINK_INPUTS, KINKS
    program = analysis.analyze(KINKS).program
    grads = interp.run_function(program, "k_grads", KINK_INPUTS, dtype=np.float64)[1:]
    for seed in range(3):
        (c,) = directional.check_gradients(program, "k", KINK_INPUTS, grads, 0.0, seed)
        assert c.ok and c.skipped == 7 * directional.DIRECTIONS, (seed, c)
    monkeypatch.setattr(kinks, "classify", lambda *args, **kw: kinks.SMOOTH)
    assert not any(c.ok for c in directional.check_gradients(program, "k", KINK_INPUTS, grads, 0.0))


def test_a_wrong_vjp_fails_validate_by_default_and_exhaustive(tmp_path, monkeypatch):
    """Through the library: the planted VJP is compiled too, so the library agrees with the
    interpreter (every `result k` check passes) and only the gradient check can see it."""
    path = tmp_path / "planted.kina"
    path.write_text(SOURCE)
    _planted_reshape_vjp(monkeypatch)
    for exhaustive, reference in ((False, directional.REFERENCE), (True, gradients.FD64_REFERENCE)):
        report = validate.validate_file(path, exhaustive=exhaustive)
        assert report.failing == ["f (reverseMode)"], validate.format_report(report)
        grads = next(f for f in report.functions if f.name == "f (reverseMode)")
        bad = [(c.name, c.reference) for c in grads.checks if not c.ok]
        assert bad == [("d/d b", reference)], validate.format_report(report)


def test_a_wrong_compiled_element_fails_the_result_checks(tmp_path, monkeypatch):
    """A cotangent element off by 1e-3 in the library alone (injected where its results come
    back from the child) fails its element check against the float64 reverse mode, the
    other half of the gradient check."""
    path = tmp_path / "right.kina"
    path.write_text(SOURCE)
    load = validate.load_outputs

    def perturbed(work, key):
        got = load(work, key)
        if key == gradients.GRAD_PREFIX + "f":
            got[3] = got[3].copy()
            got[3][AT] += OFF
        return got
    monkeypatch.setattr(validate, "load_outputs", perturbed)
    report = validate.validate_file(path)
    grads = next(f for f in report.functions if f.name == "f (reverseMode)")
    assert [c.name for c in grads.checks if not c.ok] == ["result 3"], validate.format_report(report)
    assert [f.name for f in report.functions if f.ok] == ["f", "f_grads"]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_progress_line_shows_only_on_a_terminal_and_only_after_the_delay():
    """`kinac build` / `kinac validate`'s one-line indicator (compiler/core/progress.py)."""
    slow, quick, piped = _Terminal(), _Terminal(), io.StringIO()
    with progress.Ticker(slow, "kinac build: building x.kina", delay=0.05, period=0.01) as ticker:
        time.sleep(0.2)
        ticker.update("kinac validate: x.kina: validated 1/2")
        time.sleep(0.1)
    text = slow.getvalue()
    assert "\rkinac build: building x.kina 0." in text and "validated 1/2" in text
    assert text.endswith("\r") and text.rstrip("\r").endswith(" ")     # erased: nothing left behind
    for stream in (quick, piped):
        with progress.Ticker(stream, "never shown", delay=0.05 if stream is piped else 5.0, period=0.01):
            time.sleep(0.1)
        assert stream.getvalue() == ""
