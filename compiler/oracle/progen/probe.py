"""The random-value probe of a generated program (issue 26): a program whose results are the
random values themselves, so the differential run can hold them to the interpreter bit for bit.

    probe = random_probe(case)      # None: the case draws nothing
    probe.source("c17_r")           # fn c17_r(same params) -> (key, draw, mask, ..)

The probe keeps the case's parameters (so it runs on the very inputs the case runs on) and
the backward slice of every random op's let (keys, the parameters and lets they come from,
a categorical's logits), in the case's order, and returns each random op's value: the keys
random_split and random_fold_in make and the draws of random_bits, random_uniform,
random_normal, bernoulli and categorical.  Downstream arithmetic is left out, so a bit
that differs is seen as a bit, not through a tolerance.
"""
from __future__ import annotations

import dataclasses

from compiler.oracle.progen.base import CALL
from compiler.oracle.progen.case import Case, Let
from compiler.oracle.progen.makers_random import RANDOM_MAKERS

RANDOM_OPS = frozenset(RANDOM_MAKERS)


def random_lets(case: Case) -> list[Let]:
    """The case's lets that are random ops, in order."""
    return [l for l in case.lets if l.op in RANDOM_OPS]


def backward_slice(lets: list[Let], roots: set[str]) -> list[Let]:
    """The lets that `roots` are computed from (roots included), in their order."""
    need = set(roots)
    keep: list[Let] = []
    for let in reversed(lets):
        if let.name in need:
            keep.append(let)
            need.update(let.args)
    return keep[::-1]


def random_probe(case: Case) -> Case | None:
    """A case returning every random value of `case` (None when it has none): same
    parameters, the backward slice of the random lets, no handle, no helper split; the
    generic helpers are kept for a categorical whose logits come from a call."""
    draws = random_lets(case)
    if not draws:
        return None
    lets = backward_slice(case.lets, {l.name for l in draws})
    calls = any(l.op == CALL for l in lets)
    return dataclasses.replace(case, lets=lets, results=[l.name for l in draws], ad=False, picks=[], split=0,
                               generics=case.generics if calls else [], gh=None)
