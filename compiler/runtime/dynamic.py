"""A function exported with dynamic sizes (issue 25): its sizes are bound at each call from the
arguments' shapes (compiler/runtime/binding.py), and the concrete call at those shapes is
prepared once (compiler/runtime/prepared.py) and cached, so a call at shapes seen before
costs a dict lookup more than a static call."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from compiler.backend.entry_points import BAD_SIZES
from compiler.runtime import binding, dlpack
from compiler.runtime.arrays import Array, empty
from compiler.runtime.dlpack import FRESH_KINDS
from compiler.runtime.function import JSONObject, KinaFunction, _as_tuple, numpy_dtype
from compiler.runtime.loader import KinaRuntimeError, manifest_sizes
from compiler.runtime.prepared import FASTCALL_DTYPES, Prepared, TensorSpec

try:  # the C fast path, built by `pip install -e .` (setup.py)
    from compiler.runtime import _fastcall
except ImportError:  # pragma: no cover - exercised by the tests with fastcall=False
    _fastcall = None  # type: ignore[assignment]  # (the slow path then runs every call)

if TYPE_CHECKING:
    from ctypes import _NamedFuncPointer  # what a CDLL attribute is (typeshed's name)

# Prepared calls a dynamic function keeps (by argument shapes and size keywords): a decoder
# called at T = 1, 2, ..., n adds one per length; the oldest goes first beyond this many.
CACHE_ENTRIES = 256


class DynamicKinaFunction(KinaFunction):
    """A function exported with dynamic sizes (compiler/runtime/binding.py): `f(*inputs,
    out=None, **sizes)`.  Its sizes are bound from the inputs' shapes (a size no shape
    determines is passed as a keyword named like it); the results are allocated at the
    bound shapes (out= arrays are checked against them).  A call at the shapes of an
    earlier call reuses its prepared call (a dict lookup), then runs as a static call."""

    def __init__(self, packed: _NamedFuncPointer, entry: JSONObject, fastcall: bool = True,
                 threaded: bool = False, last_error: Callable[[], bytes | None] | None = None) -> None:
        self._setup(packed, entry, threaded, last_error)
        sizes = manifest_sizes(entry)
        self.sizes = tuple(sizes)
        params = [binding.Tensor(p["name"], p["dtype"], binding.parse_dims(self.name, f"parameter `{p['name']}`",
                                                                          p["shape"], sizes))
                  for p in entry["params"]]
        results = [binding.Tensor(f"result {i}", r["dtype"], binding.parse_dims(self.name, f"result {i}",
                                                                               r["shape"], sizes))
                   for i, r in enumerate(entry["results"])]
        self._bounds = [binding.parse_bound(self.name, p["name"], p.get("index_bound"), sizes) for p in entry["params"]]
        self.params, self.results = params, results
        self._np_dtypes = [numpy_dtype(t.dtype) for t in params + results]
        self._binder = binding.SizeBinder(self.name, sizes, params, results)
        self._fastcall = fastcall
        self._cache: dict[Hashable, Prepared] = {}
        self._by_sizes: dict[tuple[int, ...], Prepared] = {}
        # the prepared call of the previous fast call and its size keywords (one tuple: threads
        # replace it whole); only fast-path calls with int keywords are kept
        self._last: tuple[Prepared, _fastcall.Entry, dict[str, object]] | None = None
        self._fast_ok = fastcall and _fastcall is not None and all(t.dtype in FASTCALL_DTYPES for t in params + results)
        self.__doc__ = self.signature()

    @property
    def uses_fastcall(self) -> bool:
        """Whether its calls take the C fast path (every dtype has a buffer format)."""
        return self._fast_ok

    def signature(self) -> str:
        return super().signature().replace("(", f"[{', '.join(self.sizes)}](", 1)

    def prepared(self, *args: object, **sizes: object) -> Prepared:
        """The prepared call for these arguments (from the cache when their shapes were seen)."""
        key: Hashable = None
        try:
            key = tuple([a.shape for a in args])   # type: ignore[attr-defined]
            if sizes:   # (only int values are keys: 2.0 == 2 and True == 1 must reach the checks)
                key = (key, tuple(sizes.items())) if all(type(v) is int for v in sizes.values()) else None
            p = self._cache.get(key)
        except (AttributeError, TypeError):        # a list argument, a list as a shape
            key = p = None
        if p is None:
            values = self._binder.bind(args, sizes)
            p = self._by_sizes.get(tuple(values.values())) or self._instantiate(values)
            if key is not None:
                if len(self._cache) >= CACHE_ENTRIES:
                    self._cache.pop(next(iter(self._cache)), None)
                    self._by_sizes.clear()
                self._cache[key] = p
                self._by_sizes[tuple(values.values())] = p
        return p

    def _instantiate(self, values: dict[str, int]) -> Prepared:
        """The concrete call at these sizes: shapes and index bounds evaluated."""
        b = self._binder
        specs = [TensorSpec(t.name, t.dtype, b.evaluate(values, t.shape, f"`{t.name}`"), dt,
                            None if bound is None else b.evaluate(values, (bound,), f"the index bound of `{t.name}`")[0])
                 for t, dt, bound in zip(self.params, self._np_dtypes, self._bounds)]
        specs += [TensorSpec(t.name, t.dtype, b.evaluate(values, t.shape, t.name), dt)
                  for t, dt in zip(self.results, self._np_dtypes[len(self.params):])]
        return Prepared(specs[:len(self.params)], specs[len(self.params):], self._packed, self._fastcall,
                        list(values.values()))

    def __call__(self, *args: object, out: object = None, like: object = None, **sizes: object) -> Any:
        outs: tuple[object, ...]
        # torch results are allocated in C (as in KinaFunction.__call__)
        kind = None if out is not None or like is None else FRESH_KINDS[
            like if type(like) is str else type(like)]
        last = self._last
        if last is not None and sizes == last[2] and (not sizes or all(type(v) is int for v in sizes.values())):
            p, fast, _ = last
            # The common case: the shapes of the previous call.  The C helper checks every
            # array against that call's shapes; when they all match, the sizes are those
            # it bound (the same shapes and keywords bind the same sizes), so the call is
            # right as made.  Else it calls nothing and the call is prepared below.
            if kind is not None:
                made = _fastcall.fresh(fast, args, kind)
                if type(made) is not int:
                    return made
                if made < -1:
                    raise self._library_error(p, -1 - made)
            else:
                if out is None:
                    outs = tuple(map(empty, p.fresh_shapes, p.fresh_dtypes))
                else:
                    outs = out if type(out) is tuple else (out,) if isinstance(out, np.ndarray) else _as_tuple(out)
                declined = _fastcall.call(fast, args + outs)
                if declined < 0:
                    if declined < -1:
                        raise self._library_error(p, -1 - declined)
                    results = cast(tuple[Array, ...], outs)
                    value = results[0] if len(results) == 1 else results
                    return value if like is None else dlpack.wrap(value, like)
        p = self.prepared(*args, **sizes)
        if p.fast is not None and all(type(v) is int for v in sizes.values()):
            self._last = (p, p.fast, sizes)
        if kind is not None and p.fast is not None:
            made = _fastcall.fresh(p.fast, args, kind)
            if type(made) is not int:
                return made
            if made < -1:
                raise self._library_error(p, -1 - made)
        outs = given = self._outs(p, out)
        declined = -1 if p.fast is None else _fastcall.call(p.fast, args + outs)
        if declined >= 0 or p.fast is None:
            args, outs, declined = self._foreign(p, args, outs, declined)
        if p.fast is None or declined >= 0:
            status = self._call_checked(p, args, outs, out is None)
        else:
            status = -1 - declined
        if status:
            raise self._library_error(p, status)
        results = cast(tuple[Array, ...], given)
        value = results[0] if len(results) == 1 else results
        return value if like is None else dlpack.wrap(value, like)

    @staticmethod
    def _outs(p: Prepared, out: object) -> tuple[object, ...]:
        if out is None:
            return tuple(map(empty, p.fresh_shapes, p.fresh_dtypes))
        return out if type(out) is tuple else (out,) if isinstance(out, np.ndarray) else _as_tuple(out)

    def _library_error(self, p: Prepared, status: int) -> Exception:
        n = len(p.params) + len(p.results)
        if BAD_SIZES + n <= status < BAD_SIZES + n + len(self.sizes):
            size = self.sizes[status - BAD_SIZES - n]
            return KinaRuntimeError(f"{self.name}: the library refused size {size} (a size below 1, which the "
                                    f"runtime had checked: the manifest and the library disagree); rebuild with "
                                    f"`kinac build` and keep the .so and its .json together")
        return super()._library_error(p, status)
