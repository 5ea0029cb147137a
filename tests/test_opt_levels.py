"""-O2 computes what -O0 computes: every op row of test_ops_compiled (forward and
backward) and every example's `main`, built at both levels; plus the pieces the
-O2 pipeline and the fast call path add (pass pipeline text, transform script,
the scatter rewrite, packed entry points, repeated calls).

To keep CI time modest, all op rows go into ONE module per level (functions
f_<i> / g_<i>), so this file does two op builds and two builds per example."""
import os
from pathlib import Path

import numpy as np
import pytest
from emit_support import regen
from test_ops_compiled import ROWS, _check, source

from compiler import build
from compiler.backend import engine, loop_tags, parallelize, pipelines, rewrites, threads, toolchain, transform_library
from compiler.backend import errors as toolchain_errors
from compiler.oracle import interp, validate
from compiler.runtime import library as runtime

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.kina") if not p.name.startswith("invalid_"))
ROW_NAMES = sorted(ROWS)


def combined_source() -> str:
    """Every row's program with its functions renamed f_<i> / g_<i>."""
    parts = []
    for i, row in enumerate(ROW_NAMES):
        text = source(row)
        text = text.replace("fn f(", f"fn f_{i}(").replace("handle f(", f"handle f_{i}(")
        parts.append(text.replace("fn g(", f"fn g_{i}("))
    return "\n".join(parts)


def _build(path: Path, out: Path, level: int, sizes: dict | None = None):
    res = build.build_file(path, out, level, sizes=sizes)
    assert res.ok, "\n".join(res.source.render(d) for d in res.diagnostics)
    return res, runtime.load(res.so_path)


def _build_both(tmp_path: Path, stem: str, src: str):
    """`src` built at -O2 and -O0: (the -O2 BuildResult, its library, the -O0 library)."""
    path = tmp_path / f"{stem}.kina"
    path.write_text(src)
    res2, lib2 = _build(path, tmp_path / f"{stem}_O2.so", 2)
    _, lib0 = _build(path, tmp_path / f"{stem}_O0.so", 0)
    return res2, lib2, lib0


@pytest.fixture(scope="module")
def op_libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    path = d / "ops.kina"
    path.write_text(combined_source())
    return {level: _build(path, d / f"ops_O{level}.so", level) for level in (0, 2)}


def _assert_same(got, want, what: str) -> None:
    for i, (g, w) in enumerate(zip(validate._flat(got), validate._flat(want))):
        assert g.shape == w.shape and g.dtype == w.dtype, what
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=1e-6, atol=1e-6, err_msg=f"{what}: result {i}")


@pytest.mark.parametrize("row", ROW_NAMES)
def test_op_row_at_O2_matches_interp_and_O0(op_libs, row):
    i = ROW_NAMES.index(row)
    (res2, lib2), (_, lib0) = op_libs[2], op_libs[0]
    names = [f"f_{i}"] + ([f"g_{i}"] if ROWS[row][3] else [])
    for name in names:
        _check(lib2, res2.program, name, 0)          # same reference and tolerance as -O0's test
        args = interp.random_inputs(res2.program.functions[name], 1, res2.program)
        _assert_same(lib2[name](*args), lib0[name](*args), f"{row}: {name} -O2 vs -O0")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_main_at_O2_matches_O0(tmp_path, example):
    outs = {}
    for level in (0, 2):
        # a generic example at the sizes its golden has (examples/storylm.kina: StoryLM-0's)
        res, lib = _build(example, tmp_path / f"{example.stem}_O{level}.so", level, regen.SIZES.get(example.stem))
        if "main" not in lib:
            pytest.skip(f"{example.name} has no main")
        outs[level] = lib.main()
    _assert_same(outs[2], outs[0], f"{example.stem}: main")


# ---- the -O2 pipeline ---------------------------------------------------------------------
def test_pipeline_text_nests_function_passes():
    text = pipelines.pipeline_text(["--inline", "--promote-buffers-to-stack=max-alloc-size-in-bytes=64",
                                    "--canonicalize"])
    assert text == ("builtin.module(inline,func.func(promote-buffers-to-stack{max-alloc-size-in-bytes=64}),"
                    "canonicalize)")


def test_O2_runs_the_transform_script_and_O0_does_not(tmp_path):
    o2 = pipelines.passes_for("", 2, tmp_path)
    assert any(p.startswith("--transform-interpreter") for p in o2)
    library = tmp_path / "kina_transforms.mlir"
    assert library.read_text() == transform_library.TRANSFORM_LIBRARY
    assert not any("transform" in p for p in pipelines.passes_for("", 0))
    with pytest.raises(toolchain_errors.ToolchainError, match="work_dir"):
        pipelines.passes_for("", 2)


def test_O2_interchanges_matmul_loops(tmp_path):
    """The matmul becomes a generic whose innermost dim is the parallel j (not the reduction k)."""
    mlir = ("func.func @kina_f(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<2x4xf32>) -> tensor<2x4xf32> {\n"
            "  %r = linalg.matmul ins(%a, %b : tensor<2x3xf32>, tensor<3x4xf32>) outs(%c : tensor<2x4xf32>)"
            " -> tensor<2x4xf32>\n  return %r : tensor<2x4xf32>\n}\n")
    ir_mod, passmanager, _ = engine.engine_module()
    passes = [p for p in pipelines.passes_for(mlir, 2, tmp_path) if "transform" in p]
    with ir_mod.Context():
        module = ir_mod.Module.parse(mlir)
        passmanager.PassManager.parse(pipelines.pipeline_text(passes)).run(module.operation)
        text = str(module)
    assert "linalg.matmul" not in text
    assert 'iterator_types = ["parallel", "reduction", "parallel"]' in text


def test_O2_compile_error_is_a_toolchain_diagnostic(tmp_path):
    bad = "func.func @kina_f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<3xf32>\n}\n"
    res = toolchain.compile_mlir(bad, tmp_path / "bad.so", opt_level=2)
    assert not res.ok
    # The -O2 worker verifies the module before any pass: a lowering bug is named as such.
    assert res.diagnostics[0].code == "toolchain" and "mlir-verify" in res.diagnostics[0].message


def test_engine_stage_timings(tmp_path, op_libs):
    timings: dict = {}
    res = toolchain.compile_mlir(op_libs[2][0].mlir, tmp_path / "t.so", opt_level=2, timings=timings)
    assert res.ok
    assert list(timings) == ["passes", "llvm-opt", "codegen", "cc"]


# ---- packed entry points and repeated calls ------------------------------------------------
ADD = "fn plus(a: Tensor[F32, [2, 3]], b: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {\n  a + b\n}\n"


@pytest.fixture(scope="module", params=[0, 2], ids=["O0", "O2"])
def add_fn(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("add")
    (d / "add.kina").write_text(ADD)
    _, lib = _build(d / "add.kina", d / "add.so", request.param)
    return lib


def test_library_exports_packed_entry_points(add_fn):
    assert hasattr(add_fn._dll, "_kina_packed_kina_plus")


def test_repeated_calls_see_new_contents_and_recheck_arrays(add_fn):
    """The same arrays called again: new contents are read, and a new array of the wrong
    shape or a wrong argument count is still refused (public behaviour of compiler.runtime.library,
    whatever it remembers between calls)."""
    f = add_fn.plus
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32)
    out = np.empty((2, 3), np.float32)
    assert f(a, b, out=out) is out
    a[:] = 5.0                                    # same objects, new contents
    assert f(a, b, out=out) is out and np.all(out == 7.0)
    with pytest.raises(runtime.KinaArgumentError, match="shape"):
        f(a, np.ones((3, 2), np.float32), out=out)
    with pytest.raises(runtime.KinaArgumentError, match="takes 2"):
        f(a, out=(b,))


def test_many_argument_sets_and_converted_inputs(add_fn):
    f = add_fn.plus
    a = np.ones((2, 3), np.float32)
    for k in range(300):                          # more sets than any cache would keep
        out = np.empty((2, 3), np.float32)
        f(a, np.full((2, 3), float(k), np.float32), out=out)
        assert np.all(out == 1.0 + k)
    np.testing.assert_array_equal(f(a.tolist(), a), 2 * a)    # converted input


VECTOR_MM = """
fn mm(a: Tensor[F32, [16, 24]], b: Tensor[F32, [24, 64]]) -> Tensor[F32, [16, 64]] {
  a @ b
}
fn bmm(a: Tensor[F32, [2, 8, 5]], b: Tensor[F32, [2, 5, 32]]) -> Tensor[F32, [2, 8, 32]] {
  a @ b
}
"""


def test_register_tiled_matmuls_match_O0(tmp_path):
    """Shapes that tile into MATMUL_TILE take the vectorised path at -O2 (FMA: float tolerance)."""
    path = tmp_path / "vmm.kina"
    path.write_text(VECTOR_MM)
    res2, lib2 = _build(path, tmp_path / "vmm_O2.so", 2)
    _, lib0 = _build(path, tmp_path / "vmm_O0.so", 0)
    ir_mod, _, _ = engine.engine_module()
    with ir_mod.Context():
        assert parallelize.tag_vectorizable(ir_mod, ir_mod.Module.parse(res2.mlir)) == 2
    rng = np.random.default_rng(0)
    for name in ("mm", "bmm"):
        args = [rng.standard_normal(p.shape).astype(np.float32) for p in lib2[name].params]
        got, want = lib2[name](*args), lib0[name](*args)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, np.matmul(*args), rtol=1e-4, atol=1e-4)



# M x N shapes the 8 x 32 tile does not divide, each with the peeling its tag asks for
PEELED_MM = {"rows": ((17, 9, 64), [1, 0, 0, 32]), "cols": ((16, 13, 40), [0, 1, 0, 32]),
             "both": ((13, 10, 70), [1, 1, 0, 32]), "k1": ((250, 1, 33), [1, 1, 0, 32]),
             "wide": ((100, 30, 1000), [1, 1, 0, 32]), "odd_cols": ((16, 9, 58), [0, 1, 1, 32]),
             "odd_both": ((250, 6, 250), [1, 1, 1, 32]), "batch": ((3, 12, 6, 40), [1, 1, 0, 32]),
             "batch_rows": ((2, 9, 15, 32), [1, 0, 0, 32]), "batch_odd": ((2, 9, 8, 57), [1, 1, 1, 32]),
             # narrower than 32 columns: 8-column tiles
             "head10": ((24, 35, 10), [0, 1, 0, 8]), "head16": ((13, 40, 16), [1, 0, 0, 8]),
             "head24": ((16, 22, 24), [0, 0, 0, 8]), "head31": ((9, 30, 31), [1, 1, 0, 8]),
             "batch_head": ((2, 8, 45, 12), [0, 1, 0, 8]),
             # under parallelize.PEEL_MIN_FLOPS: a loop nest
             "tiny": ((8, 16, 16), None)}


def _peel_tags(ir_mod, module) -> dict[str, list[int] | None]:
    """Each function's matmul: its kina.vectorize_peeled tag, or None."""
    tags: dict[str, list[int] | None] = {}
    for fn in module.body.operations:
        for op in fn.regions[0].blocks[0].operations:
            if op.operation.name in ("linalg.matmul", "linalg.batch_matmul"):
                attr = op.attributes["kina.vectorize_peeled"] if "kina.vectorize_peeled" in op.attributes else None
                tags[ir_mod.StringAttr(fn.attributes["sym_name"]).value[5:]] = (
                    list(ir_mod.DenseI64ArrayAttr(attr)) if attr is not None else None)
    return tags


def test_matmuls_the_tile_does_not_divide_are_peeled_vectorised_and_match_O0(tmp_path):
    """An f32 matmul with M >= 8 and N >= 32 that the register tile does not divide is
    tagged kina.vectorize_peeled: the script peels the partial row / column tiles off and
    vectorises the full tiles and (unless odd_rest) the partial column tile (it was an
    interchanged scalar loop nest, 32 against 92 GFLOP/s at [100, 300] @ [300, 1000]).
    Narrower or tiny ones keep the interchanged loop."""
    def fn(name: str, *dims: int) -> str:
        *b, m, k, n = dims
        return (f"fn {name}(a: Tensor[F32, {[*b, m, k]}], b: Tensor[F32, {[*b, k, n]}]) -> Tensor[F32, {[*b, m, n]}] "
                "{\n  a @ b\n}\n")
    src = "".join(fn(name, *dims) for name, (dims, _) in PEELED_MM.items())
    src += "fn narrow(a: Tensor[F32, [7, 4]], b: Tensor[F32, [4, 40]]) -> Tensor[F32, [7, 40]] {\n  a @ b\n}\n"
    src += "fn thin(a: Tensor[F32, [16, 4]], b: Tensor[F32, [4, 5]]) -> Tensor[F32, [16, 5]] {\n  a @ b\n}\n"
    res2, lib2, lib0 = _build_both(tmp_path, "peel", src)
    ir_mod, passmanager, _ = engine.engine_module()
    with ir_mod.Context():
        module = ir_mod.Module.parse(res2.mlir)
        parallelize.tag_vectorizable(ir_mod, module)
        want = {name: peel for name, (_, peel) in PEELED_MM.items()}
        assert _peel_tags(ir_mod, module) == {**want, "narrow": None, "thin": None}
        passes = pipelines.passes_for(res2.mlir, 2, tmp_path)
        cut = next(i for i, p in enumerate(passes) if "transform-interpreter" in p and "kina_o2" in p)
        engine.prepare_for_script(ir_mod, module, passes)
        engine.run_pipeline(ir_mod, passmanager, module, passes[:cut + 1], res2.mlir)
        for fn in module.body.operations:
            name = ir_mod.StringAttr(fn.attributes["sym_name"]).value[5:]
            assert ("vector.fma" in str(fn)) == (name not in ("narrow", "thin", "tiny")), name
    rng = np.random.default_rng(0)
    for name in [*PEELED_MM, "narrow", "thin"]:
        args = [rng.standard_normal(p.shape).astype(np.float32) for p in lib2[name].params]
        got, want = lib2[name](*args), lib0[name](*args)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, args[0].astype(np.float64) @ args[1], rtol=1e-4, atol=1e-4)


# Big f32 matmuls the 8 x 32 tile does not divide, wide (N >= 2048) or deep (K >= 512, N >=
# 256): the dynamic exports' packed body (parallelize._packs_static), with its last row block
# peeled ([M % 32 != 0]), from two rows on (three_rows); a batch matmul and a small one keep
# the peeled path.  Fewer rows than the tile (a decode step), big, and not packed (one row,
# or neither wide nor deep): threads over 128-column blocks ("columns"), the last block
# partial (N = 2100, 1400, 800); under PARALLEL_MIN_FLOPS a loop nest (one_small_row).
PACKED_MM = {"wide": ((37, 30, 2100), [1]), "deep": ((25, 600, 300), [1]), "rows32": ((64, 520, 260), [0]),
             "small": ((9, 600, 300), None), "three_rows": ((3, 700, 1000), [1]),
             "one_row": ((1, 1000, 2100), "columns"), "three_narrow": ((3, 500, 1400), "columns"),
             "seven_rows": ((7, 400, 800), "columns"), "one_small_row": ((1, 2048, 256), None)}


def test_big_matmuls_the_tile_does_not_divide_take_the_packed_body_or_column_threads_and_match_O0(tmp_path):
    src = "".join(f"fn {name}(a: Tensor[F32, [{m}, {k}]], b: Tensor[F32, [{k}, {n}]]) -> Tensor[F32, [{m}, {n}]] "
                  "{\n  a @ b\n}\n" for name, ((m, k, n), _) in PACKED_MM.items())
    res2, lib2, lib0 = _build_both(tmp_path, "packed", src)
    ir_mod, _, _ = engine.engine_module()
    with ir_mod.Context():
        module = ir_mod.Module.parse(res2.mlir)
        parallelize.tag_vectorizable(ir_mod, module)
        for fn in module.body.operations:
            name = ir_mod.StringAttr(fn.attributes["sym_name"]).value[5:]
            mm = next(op for op in fn.regions[0].blocks[0].operations if op.operation.name == "linalg.matmul")
            tag = mm.attributes["kina.parallel_packed"] if "kina.parallel_packed" in mm.attributes else None
            got = list(ir_mod.DenseI64ArrayAttr(tag)) if tag is not None else None
            if "kina.parallel_columns" in mm.attributes:
                got = "columns"
            assert got == PACKED_MM[name][1], name
    rng = np.random.default_rng(1)
    for name in PACKED_MM:
        args = [rng.standard_normal(p.shape).astype(np.float32) for p in lib2[name].params]
        got = lib2[name](*args)
        np.testing.assert_allclose(got, lib0[name](*args), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got, args[0].astype(np.float64) @ args[1], rtol=1e-4, atol=1e-4)


def test_transform_library_peels_every_tagged_combination():
    for op in ("linalg.matmul", "linalg.batch_matmul"):
        for peel in transform_library.PEELINGS:
            tag = ", ".join(map(str, peel))
            assert (f'match ops{{["{op}"]}} attributes{{kina.vectorize_peeled = array<i64: {tag}>}}'
                    in transform_library.TRANSFORM_LIBRARY)
    # every tag tag_vectorizable can write: with 32-column tiles some dim peeled (odd_rest
    # only with N peeled); with 8-column tiles (N < 32) any peeling, never odd_rest
    wide = {(m, n, o, 32) for m in (0, 1) for n in (0, 1) for o in (0, n) if m or n}
    narrow = {(m, n, 0, transform_library.NARROW_TILE_N) for m in (0, 1) for n in (0, 1)}
    assert set(transform_library.PEELINGS) == wide | narrow

# ---- the -O2 scatter rewrite (rewrites.rewrite_scatters) -----------------------------------
SCATTER = """
fn embed(emb: Tensor[DT, [6, 5]], ids: Tensor[I64, [3, 4]], w: Tensor[DT, [3, 4, 5]]) -> Tensor[DT, [3, 4, 5]] {
  let x = gather(emb, ids) in
  let y = x * w in
  y
}
fn g_emb(emb: Tensor[DT, [6, 5]], ids: Tensor[I64, [3, 4]], w: Tensor[DT, [3, 4, 5]]) -> Tensor[DT, [6, 5]] {
  let (y, g, g_w) = handle embed(emb, ids, w) with reverseMode in
  g
}
"""


@pytest.mark.parametrize("dtype", ["F32", "F16"])
def test_O2_scatter_rows_accumulate_duplicates_like_O0(tmp_path, dtype):
    """g_emb = ScatterAdd(w, ids): at -O2 a loop over the 12 rows of updates, at -O0 the
    (v, d, n) generic; every index repeats, one row of emb is never hit."""
    path = tmp_path / "scatter.kina"
    path.write_text(SCATTER.replace("DT", dtype))
    res2, lib2 = _build(path, tmp_path / "scatter_O2.so", 2)
    _, lib0 = _build(path, tmp_path / "scatter_O0.so", 0)
    np_dtype = np.float32 if dtype == "F32" else np.float16
    rng = np.random.default_rng(3)
    emb = rng.standard_normal((6, 5)).astype(np_dtype)
    ids = np.array([[4, 0, 4, 2], [0, 0, 5, 2], [4, 1, 1, 5]], np.int64)   # no 3: its row stays 0
    w = rng.standard_normal((3, 4, 5)).astype(np_dtype)
    want = np.zeros((6, 5), np.float32)
    np.add.at(want, ids.reshape(-1), w.reshape(-1, 5).astype(np.float32))
    got2, got0 = lib2.g_emb(emb, ids, w), lib0.g_emb(emb, ids, w)
    np.testing.assert_array_equal(got2, got0)                          # same sums in the same order
    np.testing.assert_allclose(got2.astype(np.float32), want.astype(np_dtype), rtol=1e-3, atol=1e-3)
    assert np.all(got2[3] == 0)
    ir_mod, _, _ = engine.engine_module()
    with ir_mod.Context():
        module = ir_mod.Module.parse(res2.mlir)
        assert rewrites.rewrite_scatters(ir_mod, module) == 1
        text = str(module)
    assert "scf.for" in text and '"reduction"' not in text.split("kina.scatter_rows")[-1]


def test_O2_scatter_keeps_the_bounds_assertion(tmp_path):
    path = tmp_path / "scatter.kina"
    path.write_text(SCATTER.replace("DT", "F32"))
    res, _ = _build(path, tmp_path / "scatter_O2.so", 2)
    ir_mod, _, _ = engine.engine_module()
    with ir_mod.Context():
        module = ir_mod.Module.parse(res.mlir)
        rewrites.rewrite_scatters(ir_mod, module)
        assert 'cf.assert' in str(module) and "scatter_add index out of bounds" in str(module)


# ---- -O2 transpose tiling (loop_tags.tag_transposes) ----------------------------------------
TRANSPOSES = """
fn t2(x: Tensor[F32, [32, 48]]) -> Tensor[F32, [48, 32]] {
  x.transpose([1, 0])
}
fn t4(x: Tensor[F32, [2, 16, 3, 32]]) -> Tensor[F32, [2, 3, 32, 16]] {
  x.transpose([0, 2, 3, 1])
}
fn t3_rows(x: Tensor[F32, [2, 16, 32]]) -> Tensor[F32, [16, 2, 32]] {
  x.transpose([1, 0, 2])
}
fn t2_odd(x: Tensor[F32, [20, 48]]) -> Tensor[F32, [48, 20]] {
  x.transpose([1, 0])
}
fn t2_big(x: Tensor[F32, [528, 256]]) -> Tensor[F32, [256, 528]] {
  x.transpose([1, 0])
}
fn t4_big(x: Tensor[F32, [3, 64, 8, 96]]) -> Tensor[F32, [3, 8, 96, 64]] {
  x.transpose([0, 2, 3, 1])
}
fn t4_rows_big(x: Tensor[F32, [9, 64, 8, 32]]) -> Tensor[F32, [9, 8, 64, 32]] {
  x.transpose([0, 2, 1, 3])
}
fn t2_below(x: Tensor[F32, [128, 256]]) -> Tensor[F32, [256, 128]] {
  x.transpose([1, 0])
}
"""


def test_O2_tiled_transposes_match_O0(tmp_path):
    """Transposes moving the innermost dim, with 16-multiples there, are tagged and tiled
    (and vectorised); one keeping the innermost dim and one with a 20 are left alone."""
    res2, lib2, lib0 = _build_both(tmp_path, "tr", TRANSPOSES)
    ir_mod, _, _ = engine.engine_module()
    with ir_mod.Context():
        module = ir_mod.Module.parse(res2.mlir)
        assert loop_tags.tag_transposes(ir_mod, module) == 5
        text = str(module)
    assert "kina.transpose_tile = array<i64: 16, 16>" in text
    assert "kina.transpose_tile = array<i64: 1, 1, 16, 16>" in text      # output dim 2 walks input dim 3
    # the three of at least PARALLEL_TRANSPOSE_MIN elements are split among the threads: by
    # blocks of 16 rows where the 16 x 16 tiling cuts dim 0, by single rows otherwise;
    # t2_below (32,768 elements) stays serial
    assert text.count("kina.parallel_transpose = array<i64: 16>") == 1
    assert text.count("kina.parallel_transpose = array<i64: 1>") == 2
    rng = np.random.default_rng(4)
    perms = {"t2": (1, 0), "t4": (0, 2, 3, 1), "t3_rows": (1, 0, 2), "t2_odd": (1, 0), "t2_big": (1, 0),
             "t4_big": (0, 2, 3, 1), "t4_rows_big": (0, 2, 1, 3), "t2_below": (1, 0)}
    for name, perm in perms.items():
        x = rng.standard_normal(lib2[name].params[0].shape).astype(np.float32)
        np.testing.assert_array_equal(lib2[name](x), np.transpose(x, perm))
        np.testing.assert_array_equal(lib2[name](x), lib0[name](x))


def test_transform_library_tiles_every_tagged_rank():
    for rank in range(2, transform_library.TRANSPOSE_MAX_RANK + 1):
        for j in range(rank - 1):
            tiles = ", ".join(map(str, transform_library.transpose_tiles(rank, j)))
            assert f"kina.transpose_tile = array<i64: {tiles}>" in transform_library.TRANSFORM_LIBRARY


# ---- multithreaded kernels (scf.forall -> OpenMP loops on libomp, compiler/backend/threads.py) -------
PARALLEL = """
fn mm(a: Tensor[F32, [64, 256]], b: Tensor[F32, [256, 512]]) -> Tensor[F32, [64, 512]] {
  a @ b
}
fn bmm(a: Tensor[F32, [8, 64, 64]], b: Tensor[F32, [8, 64, 64]]) -> Tensor[F32, [8, 64, 64]] {
  a @ b
}
fn rows(x: Tensor[F32, [512, 512]], y: Tensor[F32, [512, 512]]) -> Tensor[F32, [512, 512]] {
  (x * y).log_softmax(axis=1) + x.exp()
}
fn wide(a: Tensor[F32, [64, 256]], b: Tensor[F32, [256, 2048]]) -> Tensor[F32, [64, 2048]] {
  a @ b
}
fn wide_k(a: Tensor[F32, [32, 512]], b: Tensor[F32, [512, 2048]]) -> Tensor[F32, [32, 2048]] {
  a @ b
}
fn deep(a: Tensor[F32, [32, 4096]], b: Tensor[F32, [4096, 256]]) -> Tensor[F32, [32, 256]] {
  a @ b
}
"""
NAMES = ("mm", "bmm", "rows", "wide", "wide_k", "deep")
SMALL = "fn small(a: Tensor[F32, [8, 32]], b: Tensor[F32, [32, 32]]) -> Tensor[F32, [8, 32]] {\n  a @ b\n}\n"
# Run in a child process: libomp starts its threads on the first parallel loop, so the
# thread count before and after that call says whether the kernel ran threads.
THREADS_SCRIPT = """
import os, sys
import numpy as np
from compiler import runtime
lib = runtime.load(sys.argv[1])
before = len(os.listdir("/proc/self/task"))
rng = np.random.default_rng(0)
for name in ("mm", "bmm", "rows", "wide", "wide_k", "deep"):
    lib[name](*[rng.standard_normal(p.shape).astype(np.float32) for p in lib[name].params])
print(before, len(os.listdir("/proc/self/task")))
"""


def _needed(so: Path) -> str:
    import subprocess
    return subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def parallel_libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("par")
    path = d / "par.kina"
    path.write_text(PARALLEL)
    return {level: _build(path, d / f"par_O{level}.so", level) for level in (0, 2)}


def test_large_kernels_are_tagged_parallel(parallel_libs):
    res2, _ = parallel_libs[2]
    ir_mod, _, _ = engine.engine_module()
    with ir_mod.Context():
        module = ir_mod.Module.parse(res2.mlir)
        assert parallelize.tag_vectorizable(ir_mod, module) == 5
        assert parallelize.tag_parallel_generics(ir_mod, module) >= 3   # log_softmax pieces, exp, +
        text = str(module)
        packed = {op.parent.attributes["sym_name"] for op in rewrites.walk_ops(
            ir_mod, module, lambda op: op.name == "linalg.matmul" and "kina.pack_b" in op.attributes)}
    assert "kina.parallel = array<i64: 32, 128>" in text        # mm: 32 x 128 blocks
    assert "kina.parallel = array<i64: 1, 0, 0>" in text        # bmm: one batch item per task
    assert parallelize.parallel_blocks(False, 8, 96) == (8, 32)
    # B rows 2048 floats apart (16 panels of 128): packed; mm's 512 columns: not; deep's [4096, 128]
    # panels (2 MiB, more than an L2): packed (32 rows: too few for strips)
    assert {str(n) for n in packed} == {'"kina_wide"', '"kina_wide_k"', '"kina_deep"'}
    assert not parallelize._packs_b(2048, 256, 128)      # 1 MiB panels: not packed as panels,
    assert parallelize._strips(256, 2048, 256, transposed_b=True)   # but the scaled lm_head VJP runs over strips


def test_parallel_kernels_match_O0_and_numpy(parallel_libs):
    (_, lib2), (_, lib0) = parallel_libs[2], parallel_libs[0]
    rng = np.random.default_rng(1)
    for name in NAMES:
        args = [rng.standard_normal(p.shape).astype(np.float32) for p in lib2[name].params]
        got, want = lib2[name](*args), lib0[name](*args)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4, err_msg=name)
        if name != "rows":
            # float32 sums of K products round by about sqrt(K) ulps of their terms: deep's 4096
            np.testing.assert_allclose(got, np.matmul(*args), rtol=1e-4, atol=1e-4 * max(1, args[0].shape[-1] // 512),
                                       err_msg=name)
    x, y = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    z = x * y
    ref = z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
    np.testing.assert_allclose(lib2.rows(x, y), ref + np.exp(x), rtol=1e-5, atol=1e-4)


def test_parallel_kernels_start_threads_and_link_the_openmp_runtime(parallel_libs):
    import subprocess
    import sys
    if threads.openmp_library() is None:
        pytest.skip("no OpenMP runtime (pip install cmeel-libomp): kernels are serial")
    (res2, _), (res0, _) = parallel_libs[2], parallel_libs[0]
    assert threads.LIBRARY in _needed(res2.so_path)
    assert threads.LIBRARY not in _needed(res0.so_path)     # -O0 stays serial
    proc = subprocess.run([sys.executable, "-c", THREADS_SCRIPT, str(res2.so_path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before, after = map(int, proc.stdout.split())
    assert after > before


def test_small_kernels_stay_serial(tmp_path):
    """StoryLM-0-sized kernels get no forall: no threads, no OpenMP runtime linked."""
    path = tmp_path / "small.kina"
    path.write_text(SMALL)
    res, lib = _build(path, tmp_path / "small_O2.so", 2)
    assert threads.LIBRARY not in _needed(res.so_path)
    a, b = np.ones((8, 32), np.float32), np.ones((32, 32), np.float32)
    np.testing.assert_array_equal(lib.small(a, b), a @ b)


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def test_parallel_calls_keep_memory_flat(parallel_libs):
    """Parallel loops allocate nothing that outlives a call (libomp's per-thread state is made once)."""
    _, lib = parallel_libs[2]
    rng = np.random.default_rng(2)
    args = {n: [rng.standard_normal(p.shape).astype(np.float32) for p in lib[n].params] for n in ("mm", "rows", "wide")}
    outs = {n: np.empty(lib[n].results[0].shape, np.float32) for n in args}
    for _ in range(20):   # warm up: thread pool, allocator arenas of the worker threads
        for n in args:
            lib[n](*args[n], out=outs[n])
    before = _rss_kib()
    for _ in range(300):
        for n in args:
            lib[n](*args[n], out=outs[n])
    assert _rss_kib() - before < 2048


def test_without_an_openmp_runtime_parallel_kernels_are_serial_and_equal(tmp_path, monkeypatch):
    """KINA_OPENMP=0 (or no cmeel-libomp): the forall loops become serial loops, no runtime
    is linked, and the results are the threaded build's bit for bit.  `rows` (log_softmax,
    exp) too: its exp and row log are Kina's own (compiler/backend/math_lowering.py), the same
    bits in a vector lane of any width and in a scalar loop, where libmvec's variants of
    two widths (the threaded body vectorised 4 wide, the serial one 8) differed."""
    path = tmp_path / "par.kina"
    path.write_text(PARALLEL)
    threaded = _build(path, tmp_path / "par_threads.so", 2)[1]
    monkeypatch.setenv("KINA_OPENMP", "0")
    res, serial = _build(path, tmp_path / "par_serial.so", 2)
    assert threads.LIBRARY not in _needed(res.so_path)
    rng = np.random.default_rng(3)
    for name in NAMES:
        args = [rng.standard_normal(p.shape).astype(np.float32) for p in serial[name].params]
        np.testing.assert_array_equal(serial[name](*args), threaded[name](*args), err_msg=name)
