"""Binding a dynamic function's sizes at a call (the ABI contract: issue 25, compiler/runtime/library.py).

A generic export built without `--size` values takes any sizes: its manifest entry lists
its size parameters (`"sizes": ["B", "T"]`) and writes its shapes as size expressions
(`["B", "T + 1"]`).  At a call, `SizeBinder.bind` reads the sizes from the arguments'
shapes with `compiler.core.sizes.solve` (a dimension linear in one unknown size binds it;
the rest are checks), takes sizes that no shape determines (H when only `DH*H` appears)
from keyword arguments named like the size, and raises a KinaArgumentError that names
the size and both of its sources when two disagree:

    train_step: size T is 64 from window (dimension 1, T + 1 = 65) but 32 from mask (dimension 2)

`SizeBinder.shapes` then evaluates every parameter's and result's shape and every index
bound at those sizes: the concrete call library.py prepares (and caches by shapes).
Only the arguments' shapes are read here, never their data.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from compiler.core.sizes import Bound, Dim, Size, evaluate, exact_div, parse_size, solve, subst
from compiler.runtime.errors import KinaArgumentError
from compiler.runtime.loader import KinaRuntimeError

# A source of a size: (parameter index, dimension), or ("keyword", size name).
Source = tuple[int | str, int | str]


def parse_dims(fn: str, what: str, shape: object, sizes: Sequence[str]) -> tuple[Dim, ...]:
    """A manifest shape (ints and size-expression strings) as Dims; KinaRuntimeError when malformed."""
    try:
        if not isinstance(shape, list):
            raise ValueError("not a list")
        dims = tuple(d if type(d) is int else parse_size(d) if isinstance(d, str) else _bad(d) for d in shape)
    except ValueError as e:
        raise KinaRuntimeError(f"the manifest gives {what} of `{fn}` the shape {shape!r} ({e}); "
                               f"rebuild with `kinac build`") from None
    for d in dims:
        if isinstance(d, Size) and not d.names <= set(sizes):
            raise KinaRuntimeError(f"the manifest gives {what} of `{fn}` the dimension {d}, but `{fn}` has the "
                                   f"sizes [{', '.join(sizes)}]; rebuild with `kinac build`")
    return dims


def _bad(d: object) -> Dim:
    raise ValueError(f"{d!r} is neither an integer nor a size expression")


def parse_bound(fn: str, name: str, bound: object, sizes: Sequence[str]) -> Dim | None:
    """A parameter's index_bound: None, an int >= 0 or a size expression."""
    if bound is None or (type(bound) is int and bound >= 0):
        return bound if bound is None else int(bound)
    if isinstance(bound, str):
        dims = parse_dims(fn, f"the index_bound of parameter `{name}`", [bound], sizes)
        return dims[0]
    raise KinaRuntimeError(f"the manifest gives parameter `{name}` of `{fn}` the index_bound {bound!r}, "
                           f"not a non-negative integer or a size expression; rebuild with `kinac build`")


def shape_of(value: object) -> tuple[int, ...] | None:
    """The shape an argument has (or converts to); None when it converts to no array."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):
        return shape
    try:
        return tuple(np.shape(cast(Any, value)))   # lists of numbers, numbers
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Tensor:
    """One parameter or result: its name and its shape pattern."""
    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def describe(self) -> str:
        return f"Tensor[{self.dtype}, [{', '.join(map(str, self.shape))}]]"


class SizeBinder:
    """The sizes of one dynamic function at a call; see the module docstring."""

    def __init__(self, fn: str, sizes: Sequence[str], params: Sequence[Tensor], results: Sequence[Tensor]) -> None:
        self.fn = fn
        self.sizes = tuple(sizes)
        self.params = tuple(params)
        self.results = tuple(results)

    # -- binding ----------------------------------------------------------------------
    def bind(self, args: Sequence[object], keywords: Mapping[str, object]) -> dict[str, int]:
        """The value of every size, in the manifest's order; KinaArgumentError when the
        arguments' shapes (and the size keywords) do not determine consistent sizes >= 1."""
        known = self._keywords(keywords)
        shapes = self._shapes(args)
        dims: list[tuple[Hashable, Dim, Dim]] = []
        for i, (p, shape) in enumerate(zip(self.params, shapes)):
            for d, (pattern, actual) in enumerate(zip(p.shape, shape)):
                if isinstance(pattern, Size):
                    dims.append(((i, d), pattern, actual))
                elif pattern != actual:
                    raise KinaArgumentError(f"{self.fn}: parameter `{p.name}` expects {p.describe()}, got an array "
                                            f"of shape {list(shape)} (dimension {d} is {actual}, not {pattern})")
        solution = solve(self.sizes, dims, {k: Bound(v, ("keyword", k)) for k, v in known.items()})
        if solution.unsolvable is not None:
            size, key, _, got = solution.unsolvable
            raise KinaArgumentError(self._unsolvable(size, key, got, solution.found, shapes))   # type: ignore[arg-type]
        found = {k: int(b.value) for k, b in solution.found.items() if not isinstance(b.value, Size)}
        sources = {k: b.source for k, b in solution.found.items()}
        for key, expected, dim in solution.checks:
            if not isinstance(expected, Size) and expected != dim:
                raise KinaArgumentError(self._conflict(key, dim, found, sources, shapes))   # type: ignore[arg-type]
        missing = [s for s in self.sizes if s not in found]
        if missing:
            raise KinaArgumentError(self._missing(missing, dims, solution.found))
        return {s: found[s] for s in self.sizes}

    def _missing(self, missing: list[str], dims: list[tuple[Hashable, Dim, Dim]], bound: dict[str, Bound]) -> str:
        """Name the sizes to pass: the first missing one that determines all the others once
        given (H when only DH*H appears: DH follows), else all of them."""
        for size in missing:
            trial = solve(self.sizes, dims, {**bound, size: Bound(1, ("keyword", size))})
            if trial.unsolvable is None and len(trial.found) == len(self.sizes):
                missing = [size]
                break
        given = ", ".join(f"{s}=<int>" for s in missing)
        what = f"size {missing[0]} is" if len(missing) == 1 else f"sizes {', '.join(missing)} are"
        return (f"{self.fn}: {what} not determined by the arguments' shapes; pass "
                f"{'it' if len(missing) == 1 else 'them'}: {self.fn}(..., {given})")

    def _keywords(self, keywords: Mapping[str, object]) -> dict[str, int]:
        known = {}
        for name, value in keywords.items():
            if name not in self.sizes:
                raise KinaArgumentError(f"{self.fn} got the keyword `{name}`, which is no size of it "
                                        f"(its sizes: {', '.join(self.sizes)})")
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise KinaArgumentError(f"{self.fn}: size {name} must be an int, got {type(value).__name__}")
            if value < 1:
                raise KinaArgumentError(f"{self.fn}: size {name}={value} must be at least 1")
            known[name] = int(value)
        return known

    def _shapes(self, args: Sequence[object]) -> list[tuple[int, ...]]:
        if len(args) != len(self.params):
            raise KinaArgumentError(f"{self.fn} takes {len(self.params)} argument(s) "
                                    f"({', '.join(p.name for p in self.params) or 'none'}), got {len(args)}")
        shapes = []
        for p, a in zip(self.params, args):
            shape = shape_of(a)
            if shape is None:
                raise KinaArgumentError(f"{self.fn}: parameter `{p.name}` expects {p.describe()}, got "
                                        f"{type(a).__name__} that does not convert to an array")
            if len(shape) != len(p.shape):
                raise KinaArgumentError(f"{self.fn}: parameter `{p.name}` expects {p.describe()} (rank "
                                        f"{len(p.shape)}), got an array of shape {list(shape)}")
            shapes.append(tuple(int(d) for d in shape))
        return shapes

    # -- messages ---------------------------------------------------------------------
    def _source(self, key: Source, shapes: Sequence[tuple[int, ...]], found: Mapping[str, int]) -> str:
        """`window (dimension 1, T + 1 = 65)`, `mask (dimension 2)` or `the keyword H=2`."""
        what, d = key
        if what == "keyword":
            return f"the keyword {d}={found[str(d)]}"
        assert isinstance(what, int) and isinstance(d, int)
        pattern = self.params[what].shape[d]
        actual = shapes[what][d]
        plain = isinstance(pattern, Size) and str(pattern) in self.sizes
        return f"{self.params[what].name} (dimension {d}" + (")" if plain else f", {pattern} = {actual})")

    def _conflict(self, key: tuple[int, int], actual: int, found: dict[str, int], sources: Mapping[str, Hashable],
                  shapes: Sequence[tuple[int, ...]]) -> str:
        """Dimension `key` disagrees with the sizes bound before it: name the size and both sources."""
        i, d = key
        pattern = self.params[i].shape[d]
        assert isinstance(pattern, Size)
        for size in (s for s in self.sizes if s in pattern.names):
            others = subst(pattern, {k: v for k, v in found.items() if k != size})
            linear = others.linear_in(size) if isinstance(others, Size) and others.names == {size} else None
            if linear is None:
                continue
            implied = exact_div(actual - linear[1], linear[0])
            if isinstance(implied, int) and implied >= 1:
                return (f"{self.fn}: size {size} is {found[size]} from "
                        f"{self._source(sources[size], shapes, found)} "   # type: ignore[arg-type]
                        f"but {implied} from {self._source(key, shapes, found)}")
        expected = evaluate(pattern, found)
        return (f"{self.fn}: parameter `{self.params[i].name}` has {actual} at dimension {d}, but its shape "
                f"says {pattern} = {expected} there ({self._with(pattern, found, sources, shapes)})")

    def _with(self, pattern: Size, found: Mapping[str, int], sources: Mapping[str, Hashable],
              shapes: Sequence[tuple[int, ...]]) -> str:
        return ", ".join(f"{s} = {found[s]} from {self._source(sources[s], shapes, found)}"   # type: ignore[arg-type]
                         for s in self.sizes if s in pattern.names and s in found)

    def _unsolvable(self, size: str, key: tuple[int, int], actual: int, bound: Mapping[str, Bound],
                    shapes: Sequence[tuple[int, ...]]) -> str:
        i, d = key
        pattern = self.params[i].shape[d]
        found = {k: int(b.value) for k, b in bound.items()}   # type: ignore[arg-type]   # ints at run time
        sources = {k: b.source for k, b in bound.items()}
        context = self._with(pattern, found, sources, shapes) if isinstance(pattern, Size) else ""
        return (f"{self.fn}: parameter `{self.params[i].name}` has {actual} at dimension {d}, but its shape says "
                f"{pattern} there: no size {size} >= 1 gives {actual}" + (f" (with {context})" if context else ""))

    # -- the concrete call --------------------------------------------------------------
    def evaluate(self, values: Mapping[str, int], shape: tuple[Dim, ...], what: str) -> tuple[int, ...]:
        """A shape at the bound sizes; a negative dimension (`T - 2` at T = 1) is a KinaArgumentError."""
        out = tuple(evaluate(d, values) for d in shape)
        for d, (pattern, n) in enumerate(zip(shape, out)):
            if n < 0:
                at = ", ".join(f"{k}={v}" for k, v in values.items())
                raise KinaArgumentError(f"{self.fn}: at {at}, dimension {d} of {what} is {pattern} = {n} < 0")
        return out
