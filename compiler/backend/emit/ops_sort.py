"""MLIR lowerings of sort, argsort, topk and argtopk.  emit_ops.LOWERINGS takes these rows
from SORT_LOWERINGS; the emitter signature is the same, `fn(em, node, args, out) -> str`.

Correctness first, in two linalg.generics over the sorted axis (O(n^2) per row, fine for
the rows of a sampling step; a long axis is slow): the first counts, for every element,
the elements that go before it (rank = #{j : x_j before x_i, or x_j ties x_i and j < i}:
stable, NaN counted as largest); the second writes position p from the element whose rank
is p (each rank is held by exactly one element).  topk and argtopk are the first k
positions of the stable descending order.
"""
from __future__ import annotations

from compiler.backend.emit.builder import Emitter, FnEmitter, Ty, identity, ty
from compiler.ir import nodes as ir

# sort's and argsort's `descending` (tests/test_tables.py: one row per choice)
DESCENDING = {"false": False, "true": True}


def _along(n: int, axis: int) -> list[str]:
    """The map reading the element at loop dimension d{n} along axis (the others as is)."""
    return [f"d{n}" if d == axis else f"d{d}" for d in range(n)]


def _ranks(em: FnEmitter, x: str, src: Ty, axis: int, descending: bool) -> str:
    """I64 tensor of x's shape: each element's position in the stable order along axis."""
    n = src.rank
    counts = Ty("i64", src.shape)

    def body(xi: str, xj: str, acc: str) -> str:
        a, b = em.load(xi, src.elem), em.load(xj, src.elem)
        nan_a, nan_b = (em.op(f"arith.cmpf uno, {v}, {v} : {em.F}") for v in (a, b))
        true = em.scalar(1, "i1")
        num_a = em.op(f"arith.xori {nan_a}, {true} : i1")
        num_b = em.op(f"arith.xori {nan_b}, {true} : i1")
        if descending:   # b before a: b > a, or b NaN and a not
            ahead = em.op(f"arith.cmpf ogt, {b}, {a} : {em.F}")
            nan_first = em.op(f"arith.andi {nan_b}, {num_a} : i1")
        else:            # b before a: b < a, or a NaN and b not
            ahead = em.op(f"arith.cmpf olt, {b}, {a} : {em.F}")
            nan_first = em.op(f"arith.andi {nan_a}, {num_b} : i1")
        before = em.op(f"arith.ori {ahead}, {nan_first} : i1")
        both_nan = em.op(f"arith.andi {nan_a}, {nan_b} : i1")
        tie = em.op(f"arith.ori {em.op(f'arith.cmpf oeq, {a}, {b} : {em.F}')}, {both_nan} : i1")
        i, j = em.op(f"linalg.index {axis} : index"), em.op(f"linalg.index {n} : index")
        earlier = em.op(f"arith.cmpi ult, {j}, {i} : index")
        goes = em.op(f"arith.ori {before}, {em.op(f'arith.andi {tie}, {earlier} : i1')} : i1")
        return em.op(f"arith.addi {acc}, {em.op(f'arith.extui {goes} : i1 to i64')} : i64")

    return em.generic([(x, src, identity(n)), (x, src, _along(n, axis))], (em.filled(counts, 0), counts, identity(n)),
                      ["parallel"] * n + ["reduction"], body)


def _place(em: FnEmitter, node: ir.OpApp, x: str, ranks: str, out: str) -> str:
    """out[.., p, ..] = the value (or position) of the element of rank p."""
    src, t, axis = ty(node.args[0].type), ty(node.type), node.attrs["axis"]
    n, counts = src.rank, Ty("i64", src.shape)
    values = t.elem != "i64"
    acc = t.with_elem(em.F) if values else t

    def body(r: str, v: str, o: str) -> str:
        p = em.op(f"arith.index_cast {em.op(f'linalg.index {axis} : index')} : index to i64")
        hit = em.op(f"arith.cmpi eq, {r}, {p} : i64")
        if values:
            return em.op(f"arith.select {hit}, {em.load(v, src.elem)}, {o} : {em.F}")
        here = em.op(f"arith.index_cast {em.op(f'linalg.index {n} : index')} : index to i64")
        return em.op(f"arith.select {hit}, {here}, {o} : i64")

    res = em.generic([(ranks, counts, _along(n, axis)), (x, src, _along(n, axis))],
                     (em.filled(acc, 0), acc, identity(n)), ["parallel"] * n + ["reduction"], body,
                     out if acc == t else None)
    return em.convert(res, acc, t.elem, out) if acc != t else res


def lower_sort(em: FnEmitter, node: ir.OpApp, args: list[str], out: str) -> str:
    """Ranks along the axis (a counting generic), then each position takes the element of
    its rank (a selecting generic): the stable order, values or I64 positions."""
    descending = DESCENDING[node.attrs.get("descending", "true")]   # topk / argtopk: descending
    ranks = _ranks(em, args[0], ty(node.args[0].type), node.attrs["axis"], descending)
    return _place(em, node, args[0], ranks, out)


SORT_LOWERINGS: dict[str, Emitter] = {"sort": lower_sort, "argsort": lower_sort, "topk": lower_sort,
                                      "argtopk": lower_sort}
