"""A call prepared once per set of shapes (compiler/runtime/library.py): the tensors'
specs, the descriptors template and the compiler.runtime._fastcall.Entry.

A static function has one, made when the library is loaded; a dynamic function
(compiler/runtime/binding.py) makes one per set of argument shapes it is called with and
keeps it in a cache, so a call at shapes seen before costs one dict lookup more than a
static call.  A dynamic function's template ends with its `int64_t sizes[k]` block: the
packed entry point takes its address after the descriptors' (args[n]), and every word of
it is fixed for the shapes, so a call writes only the data pointers.
"""
from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.core.types import DType

try:  # the C fast path, built by `pip install -e .` (setup.py)
    from compiler.runtime import _fastcall
except ImportError:  # pragma: no cover - exercised by the tests with fastcall=False
    _fastcall = None  # type: ignore[assignment]  # (the slow path then runs every call)

if TYPE_CHECKING:
    from ctypes import _NamedFuncPointer  # what a CDLL attribute is (typeshed's name)

FASTCALL_AVAILABLE = _fastcall is not None
# The dtypes whose arrays have a standard buffer format ('f', 'e', 'q'/'l'), the only ones
# compiler.runtime._fastcall checks: types.DType.
FASTCALL_DTYPES = frozenset(d.value for d in DType if d.buffer_formats)


# DLPack's DLDataTypeCode (dlpack.h) of each NumPy dtype kind the fast path takes.
_DLPACK_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


def dlpack_dtype(np_dtype: np.dtype[Any]) -> int:
    """The DLPack dtype of a NumPy dtype as _fastcall's slots take it (code << 8 | bits),
    or -1: DLPack objects of it take the Python path."""
    code = _DLPACK_CODES.get(np_dtype.kind)
    return -1 if code is None else code << 8 | 8 * np_dtype.itemsize


def _row_major_strides(shape: Sequence[int]) -> list[int]:
    strides: list[int] = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


@dataclass(frozen=True)
class TensorSpec:
    name: str            # parameter name, or "result i"
    dtype: str           # Kina dtype name
    shape: tuple[int, ...]
    np_dtype: np.dtype[Any]
    bound: int | None = None   # an I64 index parameter: every element in [0, bound)

    def describe(self) -> str:
        return f"Tensor[{self.dtype}, [{', '.join(map(str, self.shape))}]]"


@dataclass(frozen=True)
class Descriptors:
    """The descriptors of one call, {allocated, aligned, offset, sizes[R], strides[R]}
    per tensor, as consecutive int64 words: `template` has every word but the data
    pointers filled in; `words[i]` is the index of tensor i's first word (`allocated`,
    then `aligned`).  A dynamic function's size values follow, from word `sizes_word`.
    Each call fills its own copy, so concurrent calls share nothing."""
    template: bytes
    words: tuple[int, ...]
    sizes_word: int | None = None

    @staticmethod
    def of(specs: list[TensorSpec], sizes: Sequence[int] | None = None) -> Descriptors:
        block: list[int] = []
        words = []
        for spec in specs:
            words.append(len(block))
            block += [0, 0, 0, *spec.shape, *_row_major_strides(spec.shape)]
        sizes_word = None if sizes is None else len(block)
        block += sizes or []
        return Descriptors(np.array(block, np.int64).tobytes(), tuple(words), sizes_word)

    @property
    def extra(self) -> tuple[int, ...]:
        """The template words whose addresses follow the descriptors' in the pointer array."""
        return () if self.sizes_word is None else (self.sizes_word,)


class Prepared:
    """Everything a call at one set of shapes needs but the arrays (see the module docstring)."""
    __slots__ = ("params", "results", "descriptors", "fresh_shapes", "fresh_dtypes", "bounded", "slots", "fast")

    def __init__(self, params: list[TensorSpec], results: list[TensorSpec], packed: _NamedFuncPointer,
                 fastcall: bool, sizes: Sequence[int] | None = None) -> None:
        self.params = params
        self.results = results
        self.descriptors = Descriptors.of(params + results, sizes)
        self.fresh_shapes = [r.shape for r in results]
        self.fresh_dtypes = [r.np_dtype for r in results]
        self.bounded = [(i, p) for i, p in enumerate(params) if p.bound is not None]
        self.slots = [(int(np.prod(s.shape, dtype=np.int64)) * s.np_dtype.itemsize, k)   # (bytes, index)
                      for k, s in enumerate(params + results)]
        self.fast = self._fast_entry(packed) if fastcall else None

    @property
    def specs(self) -> list[TensorSpec]:
        return self.params + self.results

    def _fast_entry(self, packed: _NamedFuncPointer) -> _fastcall.Entry | None:
        """The compiler.runtime._fastcall.Entry of this call, or None where the fast path
        does not apply (extension not built, a dtype without a buffer format)."""
        specs = self.specs
        if _fastcall is None or any(s.dtype not in FASTCALL_DTYPES for s in specs):
            return None
        slots = []
        for i, (s, word) in enumerate(zip(specs, self.descriptors.words)):
            d = DType.named(s.dtype)
            slots.append((d.buffer_formats, d.itemsize, i >= len(self.params), s.shape, word,
                          -1 if s.bound is None else s.bound, dlpack_dtype(s.np_dtype)))
        address = ctypes.cast(packed, ctypes.c_void_p).value
        return _fastcall.Entry(address, self.descriptors.template, tuple(slots), np.ndarray, self.descriptors.extra)
