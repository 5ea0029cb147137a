"""The NumPy reference of pow with a tensor exponent, the scans (cumsum, cumprod), the
stable logsumexp and the sorts (sort, argsort, topk, argtopk): rows of interp.NUMPY_OPS."""
from __future__ import annotations

import numpy as np

from compiler.core.types import Attrs, TensorType
from compiler.runtime.arrays import Array


def _argsort(x: Array, axis: int, descending: bool) -> Array:
    """Stable positions that sort x along axis, NaN counted as largest (last ascending, first
    descending); ties keep their index order, as torch.sort(stable=True)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    order = np.argsort(-x, axis=axis, kind="stable")                 # NaN last here
    nan_first = np.argsort(~np.isnan(np.take_along_axis(x, order, axis)), axis=axis, kind="stable")
    out: Array = np.take_along_axis(order, nan_first, axis)
    return out


# sort's and argsort's `descending`
DESCENDING: dict[str, bool] = {"false": False, "true": True}


def _sort(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    idx = _argsort(args[0], attrs["axis"], DESCENDING[attrs["descending"]])
    return idx if not out.is_float else np.take_along_axis(args[0], idx, attrs["axis"])


def _topk(args: list[Array], attrs: Attrs, out: TensorType) -> Array:
    axis = attrs["axis"]
    idx = np.take(_argsort(args[0], axis, True), range(attrs["k"]), axis=axis)
    return idx if not out.is_float else np.take_along_axis(args[0], idx, axis)


def _logsumexp(x: Array, axis: int) -> Array:
    # max-subtracted; an axis whose max is infinite keeps it (inf stays inf, all -inf gives -inf)
    m = x.max(axis=axis, keepdims=True)
    shift = np.where(np.isfinite(m), m, 0)
    out: Array = np.log(np.exp(x - shift).sum(axis=axis, keepdims=True)) + shift
    return out


SCAN_OPS = {
    "pow_tensor": lambda a, at, t: np.power(a[0], a[1]),
    "cumsum": lambda a, at, t: np.cumsum(a[0], axis=at["axis"]),
    "cumprod": lambda a, at, t: np.cumprod(a[0], axis=at["axis"]),
    "logsumexp": lambda a, at, t: _logsumexp(a[0], at["axis"]),
    "sort": _sort,
    "argsort": _sort,
    "topk": _topk,
    "argtopk": _topk,
}
