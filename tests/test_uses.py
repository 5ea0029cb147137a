"""compiler.ir.uses: where a parameter's values go (index bounds and positivity), through layout
ops, lets, tuples, calls and handles, in and back out through results; and the manifest
records the bound of every I64 parameter of every example that feeds an index op."""
import json
from pathlib import Path

import pytest

from compiler import build
from compiler.analysis import analyze
from compiler.ir.uses import Uses

ROOT = Path(__file__).resolve().parent.parent

FLOWS = """
fn pick(x: Tensor[F32, [2, 6]], k: Tensor[I64, [2, 1]]) -> Tensor[F32, [2, 1]] {
  x.take_along_axis(k, axis=1)
}
fn same(i: Tensor[I64, [4]]) -> Tensor[I64, [2, 2]] {
  i.reshape([2, 2])
}
fn split(w: Tensor[I64, [5]]) -> (Tensor[I64, [4]], Tensor[I64, [4]]) {
  let a = w.slice(axis=0, start=0, stop=4) in
  let b = w.slice(axis=0, start=1, stop=5) in
  (a, b)
}
fn f(emb: Tensor[F32, [3, 2]], big: Tensor[F32, [7, 2]], ids: Tensor[I64, [4]],
     back: Tensor[I64, [4]], w: Tensor[I64, [5]], c1: Tensor[I64, [2]], c2: Tensor[I64, [2]],
     k: Tensor[I64, [2, 1]], x: Tensor[F32, [2, 6]], unused: Tensor[I64, [3]],
     pos: Tensor[F32, [2]], pos2: Tensor[F32, [4]]) -> Tensor[F32, [2, 1]] {
  let e = gather(emb, ids.reshape([2, 2])) in
  let e2 = gather(big, ids) in
  let r = same(back) in
  let e3 = gather(big, r) in
  let (a, b) = split(w) in
  let e4 = gather(emb, a) in
  let e5 = gather(big, b) in
  let cc = concat(c1, c2, axis=0) in
  let e6 = gather(big, cc) in
  let l = pos.log() in
  let l2 = pos2.reshape([2, 2]).sqrt() in
  pick(x, k)
}
"""


@pytest.fixture(scope="module")
def flows():
    snap = analyze(FLOWS, "flows.kina")
    assert not snap.diagnostics, snap.diagnostics
    return snap.program, Uses(snap.program)


@pytest.mark.parametrize("param,bound", [
    ("ids", 3),      # two uses (gather from [3, 2] through a reshape, and from [7, 2]): the smaller
    ("back", 7),     # into a callee that returns it reshaped, then gathered by the caller
    ("w", 3),        # into a callee returning a tuple of slices, destructured, both gathered
    ("c1", 7), ("c2", 7),   # concatenated
    ("k", 6),        # take_along_axis inside a callee
    ("unused", None),
])
def test_index_bounds_follow_the_values(flows, param, bound):
    program, uses = flows
    assert uses.index_bound(program.functions["f"], param) == bound


def test_positivity_follows_layout_ops(flows):
    program, uses = flows
    fn = program.functions["f"]
    assert uses.positive(fn, "pos") and uses.positive(fn, "pos2") and not uses.positive(fn, "x")


STORYLM0 = {"B": 1, "T": 4, "H": 2, "DH": 2, "V": 8}   # examples/storylm.kina at StoryLM-0


def test_a_handle_passes_indices_to_the_differentiated_function():
    text = (ROOT / "examples" / "storylm.kina").read_text()
    program, _ = analyze(text, "storylm.kina").program_for(STORYLM0)
    uses = Uses(program)
    assert uses.index_bound(program.functions["train_step"], "window") == 8


@pytest.mark.parametrize("example,function,bounds", [
    ("storylm", "train_step", {"window": 8}),
    ("storylm", "embedding_step", {"token_ids": 8}),
    ("storylm", "mean_nll", {"token_ids": 8, "targets": 8}),
    ("storylm", "forward", {"token_ids": 8}),
    ("storylm", "greedy", {"prompt": 8}),
    ("ad_gather", "step", {"token_ids": 8}),
])
def test_the_manifest_records_index_bounds(example, function, bounds):
    snap = analyze((ROOT / "examples" / f"{example}.kina").read_text(), example)
    program, _ = snap.program_for(STORYLM0 if example == "storylm" else {})
    manifest = build.manifest_for(program, f"{example}.so")
    fn = next(f for f in manifest["functions"] if f["name"] == function)
    got = {p["name"]: p["index_bound"] for p in fn["params"] if "index_bound" in p}
    assert got == bounds
    assert all(p["dtype"] == "I64" for p in fn["params"] if "index_bound" in p)
    json.dumps(manifest)
