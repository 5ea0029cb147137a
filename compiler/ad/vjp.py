"""The VJP table: one row per op of ops.OPS, used by autodiff.transform_ad.

A rule receives the forward node (an OpApp whose operands are Vars), the Var
`y` bound to its result, the result cotangent `g` (a Var of y's type) and
`needs[i]` (does operand i want a cotangent?).  It emits backward lets through
a `Builder` and returns one cotangent Var (or None) per operand.  Every
emitted node is a single op on Vars, typed by ops.OPS[op].infer, so the
backward graph is as checkable and lowerable as a hand-written one.

Rows without a rule say why (`unsupported`); rows whose rule only covers some
instances of the op carry a `reject(node) -> message | None` check (e.g.
reduce_keep(op=mean), rank-changing broadcast).
"""
from __future__ import annotations

from collections.abc import Mapping

from compiler.ad.builder import VJP, Builder, user_name
from compiler.ad.vjp_elementwise import (  # the rules, by op family
    _GELU_GRAD_APPROXIMATE,
    _abs,
    _add,
    _cast,
    _clamp,
    _div,
    _erf,
    _exp,
    _gelu,
    _log,
    _maximum,
    _minimum,
    _mul,
    _neg,
    _pow,
    _pow_tensor,
    _relu,
    _rsqrt,
    _sigmoid,
    _sign,
    _sqrt,
    _square,
    _sub,
    _tanh,
    _tril,
    _where,
)
from compiler.ad.vjp_layout import (  # the rules, by op family
    _REDUCE_KEEP_REJECT,
    _broadcast,
    _concat,
    _gather,
    _log_softmax,
    _matmul,
    _reduce_keep_rule,
    _reject_broadcast,
    _reject_reduce_keep,
    _reshape,
    _slice,
    _softmax,
    _take_along_axis,
    _transpose,
)
from compiler.ad.vjp_scan import (  # the rules, by op family
    _SORT_DESCENDING,
    _cumprod,
    _cumsum,
    _logsumexp,
    _sort,
    _topk,
)

__all__ = ["VJPS", "VJP", "ATTR_CHOICES", "Builder", "user_name"]

_BACKWARD_ONLY = "is IR-internal: the AD pass inserts it only in backward graphs, and it has no VJP"
_DISCRETE = ("has a discrete ({dtype}) result, so it never receives a cotangent: its let is skipped by "
             "reverseMode (cast the result to a float dtype to compute with it)")

# The rows of each enum attribute's choices that a VJP reads (tests/test_tables.py).
ATTR_CHOICES: dict[tuple[str, str], Mapping[str, object]] = {
    ("reduce_keep", "op"): _REDUCE_KEEP_REJECT,
    ("gelu", "approximate"): _GELU_GRAD_APPROXIMATE,
    ("sort", "descending"): _SORT_DESCENDING,
}

VJPS: dict[str, VJP] = {
    "add": VJP(_add),
    "sub": VJP(_sub),
    "mul": VJP(_mul),
    "div": VJP(_div),
    "neg": VJP(_neg),
    "exp": VJP(_exp),
    "log": VJP(_log),
    "tanh": VJP(_tanh),
    "sqrt": VJP(_sqrt),
    "rsqrt": VJP(_rsqrt),
    "sigmoid": VJP(_sigmoid),
    "relu": VJP(_relu),
    "matmul": VJP(_matmul),
    "transpose": VJP(_transpose),
    "reshape": VJP(_reshape),
    "broadcast": VJP(_broadcast, reject=_reject_broadcast),
    "slice": VJP(_slice),
    "concat": VJP(_concat),
    "gather": VJP(_gather),
    "reduce_keep": VJP(_reduce_keep_rule, reject=_reject_reduce_keep),
    "softmax": VJP(_softmax),
    "log_softmax": VJP(_log_softmax),
    "take_along_axis": VJP(_take_along_axis),
    "scatter_add": VJP(None, f"scatter_add {_BACKWARD_ONLY}"),
    "scatter_along_axis": VJP(None, f"scatter_along_axis {_BACKWARD_ONLY}"),
    "relu_grad": VJP(None, f"relu_grad {_BACKWARD_ONLY}"),
    "maximum": VJP(_maximum),
    "minimum": VJP(_minimum),
    "abs": VJP(_abs),
    "sign": VJP(_sign),
    "square": VJP(_square),
    "erf": VJP(_erf),
    "pow": VJP(_pow),
    "pow_tensor": VJP(_pow_tensor),
    "cumsum": VJP(_cumsum),
    "cumprod": VJP(_cumprod),
    "logsumexp": VJP(_logsumexp),
    "sort": VJP(_sort),
    "argsort": VJP(None, "argsort " + _DISCRETE.format(dtype="I64")),
    "topk": VJP(_topk),
    "argtopk": VJP(None, "argtopk " + _DISCRETE.format(dtype="I64")),
    **{op: VJP(None, f"{op} " + _DISCRETE.format(dtype=dtype)) for op, dtype in (
        ("random_split", "I64"), ("random_fold_in", "I64"), ("random_bits", "I64"), ("bernoulli", "Bool"),
        ("categorical", "I64"))},
    # draws are functions of the key alone (discrete): nothing flows back to any operand
    "random_uniform": VJP(lambda b, node, y, g, needs: [None]),
    "random_normal": VJP(lambda b, node, y, g, needs: [None]),
    "clamp": VJP(_clamp),
    "gelu": VJP(_gelu),
    "cast": VJP(_cast),
    "tril": VJP(_tril),
    "iota": VJP(None, "iota " + _DISCRETE.format(dtype="I64")),
    "argmax": VJP(None, "argmax " + _DISCRETE.format(dtype="I64")),
    **{op: VJP(None, f"{op} " + _DISCRETE.format(dtype="Bool")) for op in ("lt", "le", "gt", "ge", "eq", "ne")},
    "where": VJP(_where),
    "maximum_grad": VJP(None, f"maximum_grad {_BACKWARD_ONLY}"),
    "clamp_grad": VJP(None, f"clamp_grad {_BACKWARD_ONLY}"),
    "gelu_grad": VJP(None, f"gelu_grad {_BACKWARD_ONLY}"),
}

