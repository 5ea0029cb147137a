"""Shrinking a failing generated case (compiler/oracle/progen/generate.py) to a minimal reproducer.

    small = shrink(case, still_fails)     # still_fails(case) -> bool

Delta debugging on the let chain (Zeller's ddmin), not Hypothesis: a failure is found
by seed in a batch of cases compiled together, and Hypothesis cannot start shrinking from
a given example; every test of a candidate is a compile (seconds), so the few dozen
candidates of ddmin over a let chain of about 12 lets beat a generic shrinker's hundreds.
Every edit keeps the program well-typed by construction:

- drop the reverseMode wrapper, extra results, the SGD use of the cotangents, the handle of
  a size-generic helper (f_gh);
- make an earlier let the result (what came after it is then dead);
- remove a set of lets, each use of a removed let becoming a new parameter of its type
  (chunks of halving size, then single lets);
- bypass a let: its uses take one of its operands of the same type (`relu(x)` -> `x`);
- then remove dead lets and unused parameters; make the dtype F32 when that still fails.

A call of a size-generic helper is a let of f like any other (removed, it becomes a
parameter of its type; bypassed, its first operand of the same type); a helper that no
call reaches any more is not written (render.used_generics).

Each candidate is also type-checked before it is tested, and skipped if it does not
check: making a program F32 leaves a cast to another dtype in place (`x.cast(BF16)`), and
a reproducer that does not compile reproduces nothing.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable

from compiler.core.types import DType, TensorType
from compiler.oracle.progen.case import Case, Value

Predicate = Callable[[Case], bool]


def shrink(case: Case, still_fails: Predicate, budget_s: float = 300.0, max_tests: int = 150) -> Case:
    """The smallest variant of `case` found for which still_fails holds."""
    state = {"tests": 0, "deadline": time.monotonic() + budget_s}

    def test(candidate: Case) -> bool:
        if state["tests"] >= max_tests or time.monotonic() > state["deadline"]:
            return False
        if not well_typed(candidate):
            return False
        state["tests"] += 1
        return still_fails(candidate)

    best = _clean(copy.deepcopy(case))
    progress = True
    while progress:
        progress = False
        for edit in (_drop_ad, _drop_generic_handle, _single_result, _plain_wrapper, _as_f32):
            cand = edit(best)
            if cand is not None and test(cand):
                best, progress = cand, True
        for i in range(len(best.lets) - 1):       # an earlier value as the result
            cand = _result_at(best, i)
            if cand is not None and test(cand):
                best, progress = cand, True
                break
        chunk = max(1, len(best.lets) // 2)
        while chunk >= 1:
            i = 0
            while i < len(best.lets):
                cand = _remove(best, range(i, min(i + chunk, len(best.lets))))
                if cand is not None and test(cand):
                    best, progress = cand, True
                else:
                    i += chunk
            chunk //= 2
        for i in reversed(range(len(best.lets))):
            cand = _bypass(best, i)
            if cand is not None and test(cand):
                best, progress = cand, True
    return best


def well_typed(case: Case) -> bool:
    """Whether the case's program checks without errors (the front end CLI and build use)."""
    from compiler.analysis import analyze
    return not any(d.severity == "error" for d in analyze(case.source("f")).diagnostics)


# ---- edits (each returns a new Case, or None) ----------------------------------------
def _drop_ad(case: Case) -> Case | None:
    if not case.ad:
        return None
    out = copy.deepcopy(case)
    out.ad = False
    return _clean(out)


def _drop_generic_handle(case: Case) -> Case | None:
    if case.gh is None:
        return None
    out = copy.deepcopy(case)
    out.gh = None
    return out


def _single_result(case: Case) -> Case | None:
    if len(case.results) == 1:
        return None
    out = copy.deepcopy(case)
    out.results = out.results[:1]
    return _clean(out)


def _plain_wrapper(case: Case) -> Case | None:
    if not case.ad or case.wrapper == "tuple":
        return None
    out = copy.deepcopy(case)
    out.wrapper, out.picks = "tuple", []
    return out


def _as_f32(case: Case) -> Case | None:
    if case.dtype == DType.F32:
        return None
    out = copy.deepcopy(case)

    def f32(t: TensorType) -> TensorType:
        return t.with_dtype(DType.F32) if t.is_float else t
    lets = out.lets + [l for fn in out.generics for l in fn.lets]
    for l in lets:      # a cast (or a random draw) in the program's dtype becomes one in F32
        if l.attrs.get("dtype") == case.dtype.value:
            l.attrs["dtype"] = DType.F32.value
    out.dtype = DType.F32
    for p in out.params + [p for fn in out.generics for p in fn.params] + (out.gh.params if out.gh else []):
        p.type = f32(p.type)
    for l in lets:
        l.type = f32(l.type)
    return out


def _result_at(case: Case, i: int) -> Case | None:
    """Let i becomes the only result (what follows it is then dead)."""
    let = case.lets[i]
    if let.literal is not None or (case.ad and not let.type.is_float):
        return None
    out = copy.deepcopy(case)
    out.results = [let.name]
    return _clean(out)


def _remove(case: Case, indices: Iterable[int]) -> Case | None:
    """Drop these lets; their uses read new parameters of the same types instead."""
    idx = set(indices)
    if not idx:
        return None
    out = copy.deepcopy(case)
    for i in sorted(idx):
        let = out.lets[i]
        out.params.append(Value(let.name, let.type))   # the same name: uses stay as they are
    out.lets = [l for i, l in enumerate(out.lets) if i not in idx]
    return _clean(out)


def _bypass(case: Case, i: int) -> Case | None:
    """Uses of let i read its first operand of the same type instead."""
    let = case.lets[i]
    types = case.types()
    same = [a for a in let.args if types.get(a) == let.type]
    if let.literal is not None or not same:
        return None
    out = copy.deepcopy(case)
    for l in out.lets[i + 1:]:
        l.args = [same[0] if a == let.name else a for a in l.args]
    out.results = [same[0] if r == let.name else r for r in out.results]
    del out.lets[i]
    return _clean(out)


def _clean(case: Case) -> Case:
    """Dead lets and unused parameters removed (one unused float parameter kept under AD:
    its zero cotangent is part of what a handle returns)."""
    live = set(case.results)
    kept = []
    for l in reversed(case.lets):
        if l.name in live:
            kept.append(l)
            live.update(l.args)
    case.lets = list(reversed(kept))
    used = live
    params = [p for p in case.params if p.name in used]
    if case.ad and not any(p.type.is_float for p in params):
        spare = [p for p in case.params if p.type.is_float]
        params += spare[:1]
    case.params = params
    if case.ad and case.picks:
        n = 1 + len(case.float_params())
        case.picks = [k for k in case.picks if k < n] or [0]
    if case.ad and not (case.types()[case.results[0]].is_float):
        case.ad = False
    return case
