"""VJP exports (`--vjp f`, compiler/ad/vjp_export.py) on the interpreter: f_vjp seeded with
ones is reverseMode, its cotangents pass the directional check of kinac validate
(compiler/oracle/vjp_check.py) and a wrong cotangent fails it; what --vjp refuses.  No
library is built (the interop and DLPack tests call compiled f_vjp)."""
import numpy as np

from compiler.ad import add_vjp_exports, vjp_name
from compiler.analysis import analyze
from compiler.oracle import interp, validate, vjp_check

SOURCE = """
fn embed(emb: Tensor[F32, [8, 4]], ids: Tensor[I64, [2, 3]], w: Tensor[F32, [2, 3, 4]]) -> Tensor[F32, [2, 3, 4]] {
  let x = gather(emb, ids) in
  let z = x * w in
  let y = z.tanh() in
  y
}

fn grads(emb: Tensor[F32, [8, 4]], ids: Tensor[I64, [2, 3]], w: Tensor[F32, [2, 3, 4]])
    -> (Tensor[F32, [2, 3, 4]], Tensor[F32, [8, 4]], Tensor[F32, [2, 3, 4]]) {
  handle embed(emb, ids, w) with reverseMode
}

fn pair(x: Tensor[F32, [2]]) -> (Tensor[F32, [2]], Tensor[F32, [2]]) {
  (x, x)
}
"""


def _program(text=SOURCE, names=("embed",)):
    program, diags = analyze(text).program_for({})
    assert not diags
    return add_vjp_exports(program, names)


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 4)).astype(np.float32), np.array([[1, 4, 1], [6, 0, 4]]),
            rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 3, 4)).astype(np.float32)]


def test_signature_and_ones_seed_is_reverse_mode():
    program, diags = _program()
    assert not diags
    fn = program.functions[vjp_name("embed")]
    assert [p.name for p in fn.params] == ["emb", "ids", "w", "g_y"]
    assert len(fn.ret_type.items) == 3            # y, g_emb, g_w: the I64 ids get none
    emb, ids, w, _ = _inputs()
    ones = np.ones((2, 3, 4), np.float32)
    got = interp.run_function(program, "embed_vjp", [emb, ids, w, ones])
    want = interp.run_function(program, "grads", [emb, ids, w])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_cotangent_against_numpy():
    program, _ = _program()
    emb, ids, w, g = _inputs()
    y, g_emb, g_w = interp.run_function(program, "embed_vjp", [emb, ids, w, g], dtype=np.float64)
    x = emb.astype(np.float64)[ids]
    dz = g * (1 - np.tanh(x * w) ** 2)
    want_emb = np.zeros((8, 4))
    np.add.at(want_emb, ids, dz * w)             # the gather's VJP scatters (ids 1 and 4 twice)
    np.testing.assert_allclose(g_emb, want_emb, rtol=1e-6)
    np.testing.assert_allclose(g_w, dz * x, rtol=1e-6)


def test_directional_check_passes_and_catches_a_wrong_vjp():
    program, _ = _program()
    args = _inputs()
    got = list(interp.run_function(program, "embed_vjp", args))
    fn = program.functions["embed_vjp"]
    assert vjp_check.target_of(program, fn, {"embed"}) == "embed"
    assert vjp_check.target_of(program, fn, set()) is None
    check = vjp_check.check_vjp(program, "embed", args, got, validate.FD_STEPS, validate.FD_TOLERANCES)
    assert check.ok, check
    got[2] = got[2] * 1.05                        # a cotangent 5% off
    assert not vjp_check.check_vjp(program, "embed", args, got, validate.FD_STEPS, validate.FD_TOLERANCES).ok


def test_refusals():
    _, diags = _program(names=["nope"])
    assert "no exported function `nope`" in diags[0].message
    _, diags = _program(names=["pair"])
    assert diags[0].code == "ad-result" and diags[0].message.startswith("--vjp pair: ")
    _, diags = _program(SOURCE + "\nfn embed_vjp(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x }\n")
    assert "already has a function `embed_vjp`" in diags[0].message


def test_cotangent_name_avoids_a_parameter_named_g_y():
    text = "fn f(g_y: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let y = g_y.exp() in\n  y\n}\n"
    program, diags = _program(text, ["f"])
    assert not diags
    assert [p.name for p in program.functions["f_vjp"].params] == ["g_y", "g_y_1"]
