"""Kina types: `Tensor[DTYPE, SHAPE, @PLACEMENT]` and tuples of them.

Types are immutable values; `str(t)` is the spelling used in every diagnostic
and hover (`Tensor[F32, [1, 4, 8], @host]`).

`DType` is the one definition of every per-dtype fact: one row per dtype
below, and the interpreter, the emitter, the build (C header), the runtime,
the C fast path (its buffer formats come from here at Entry creation) and
validate derive their tables from it.  tests/test_dtypes.py checks the rows
against NumPy / ml_dtypes / MLIR and runs every dtype through all of them.

F8E4M3 is the OCP 8-bit float E4M3FN (what MLIR calls f8E4M3FN, PyTorch
float8_e4m3fn, ml_dtypes float8_e4m3fn): max 448, no infinities, one NaN
pattern per sign, and a value that overflows (or an infinity) becomes NaN.
F8E5M2 is IEEE-like (max 57344, has infinities).  F64 is IEEE binary64, the one dtype
computed in its own precision wider than f32 (the other floats compute in f32).
"""
from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class DType(Enum):
    """A Kina element type.  `DType.named("F32")` / `DType.F32`; `.value` is the Kina name.

    Per-dtype facts (attributes of each member):
      mlir          MLIR element type of its storage ("f8E4M3FN")
      itemsize      bytes per element
      numpy_name    NumPy dtype name (ml_dtypes names for BF16 / F8); `.np_dtype` resolves it
      c_type        storage type in the generated C header (narrow floats are raw bits)
      buffer_formats  struct letters its NumPy arrays export through the buffer protocol
                    ("" when NumPy cannot export it: those arrays take the runtime's Python path)
      has_inf       whether the format has infinities (E4M3FN has none: overflow is NaN)
      tolerance     (atol, rtol) of compiled results against the reference interpreter
      fd_tolerance  (atol, rtol) of compiled cotangents against finite differences (None: I64, Bool)
    Derived: is_float, np_dtype, finite_max, bits_of(x), overflows(x).
    """
    #        name      mlir        bytes numpy_name       c_type      buffer has_inf tolerance      fd_tolerance
    F16 = ("F16", "f16", 2, "float16", "uint16_t", "e", True, (1e-2, 1e-2), (5e-2, 5e-2))
    BF16 = ("BF16", "bf16", 2, "bfloat16", "uint16_t", "", True, (6e-2, 6e-2), (0.2, 0.2))
    F32 = ("F32", "f32", 4, "float32", "float", "f", True, (1e-5, 1e-4), (1e-3, 1e-2))
    # Computed in f64 end to end (not through f32 like the narrow floats); its fd bound is
    # the truncation error of validate's float64 central differences (step 1e-4: ~h^2 f3).
    F64 = ("F64", "f64", 8, "float64", "double", "d", True, (1e-10, 1e-9), (1e-6, 1e-5))
    F8E4M3 = ("F8E4M3", "f8E4M3FN", 1, "float8_e4m3fn", "uint8_t", "", False, (0.25, 0.25), (1.0, 0.5))
    F8E5M2 = ("F8E5M2", "f8E5M2", 1, "float8_e5m2", "uint8_t", "", True, (0.5, 0.5), (1.0, 0.5))
    I64 = ("I64", "i64", 8, "int64", "int64_t", "ql", False, (0, 0), None)
    # The result of comparisons and the condition of `where`: one byte holding 0 or 1, like
    # numpy.bool_ (stored as i8: memrefs of i1 do not lower to LLVM; ops compare in i1).
    Bool = ("Bool", "i8", 1, "bool_", "uint8_t", "?", False, (0, 0), None)

    _value_: str   # the Kina name (the other columns become attributes in __init__)

    def __new__(cls, name: str, *facts: object) -> DType:
        member = object.__new__(cls)
        member._value_ = name
        return member

    def __init__(self, name: str, mlir: str, itemsize: int, numpy_name: str, c_type: str,
                 buffer_formats: str, has_inf: bool, tolerance: tuple[float, float],
                 fd_tolerance: tuple[float, float] | None) -> None:
        self.mlir = mlir
        self.itemsize = itemsize
        self.numpy_name = numpy_name
        self.c_type = c_type
        self.buffer_formats = buffer_formats
        self.has_inf = has_inf
        self.tolerance = tolerance
        self.fd_tolerance = fd_tolerance

    @classmethod
    def named(cls, name: str) -> DType:
        """The dtype whose Kina name is `name` (ValueError if there is none), as `DType(name)`."""
        for d in cls:
            if d.value == name:
                return d
        raise ValueError(f"{name!r} is not a Kina dtype")

    @property
    def is_float(self) -> bool:
        """Floating dtypes receive cotangents; I64 and Bool are discrete."""
        return self.mlir.startswith(("f", "bf"))

    @cached_property
    def np_dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of its arrays (BF16 / F8 through ml_dtypes; imported on first use)."""
        import numpy as np
        if hasattr(np, self.numpy_name):
            dtype: np.dtype[Any] = np.dtype(getattr(np, self.numpy_name))
            return dtype
        import ml_dtypes
        dtype = np.dtype(getattr(ml_dtypes, self.numpy_name))
        return dtype

    @cached_property
    def finite_max(self) -> float | int:
        """The largest finite value (448 for F8E4M3; 1, true, for Bool)."""
        import numpy as np
        if self.np_dtype == np.bool_:
            return 1
        if not self.is_float:
            return int(np.iinfo(self.np_dtype).max)
        import ml_dtypes  # its finfo covers NumPy's floats and its own
        # ml_dtypes.finfo (a subclass of numpy.finfo that knows its narrow floats) is unannotated
        return float(ml_dtypes.finfo(self.np_dtype).max)  # type: ignore[no-untyped-call]

    def bits_of(self, x: float) -> int:
        """The storage bits of `x` rounded to this dtype (how NumPy / ml_dtypes round it:
        an infinity is NaN in F8E4M3), e.g. for MLIR's hexadecimal float literals.  F64, and
        F32 where x does not overflow, are packed by struct (the same C cast; see overflows)."""
        if self is DType.F64:
            return int.from_bytes(struct.pack("<d", x), "little")
        if self is DType.F32 and not self.overflows(x):
            return int.from_bytes(struct.pack("<f", x), "little")
        import numpy as np
        with np.errstate(all="ignore"):    # an out-of-range x rounds as documented, silently
            return int(np.array(x, np.float64).astype(self.np_dtype).view(f"u{self.itemsize}"))

    def overflows(self, x: float) -> bool:
        """Whether the finite number `x` rounds to an infinity (NaN in F8E4M3) in this float
        dtype: a literal that does is an error (check/scalars.py), never a silent inf.

        F64 and F32, the dtypes of nearly every literal, are answered without NumPy (whose
        import would cost every `kinac check` and `build` ~60 ms): a finite float is a
        finite f64, and struct's binary32 packing rounds as NumPy's cast does (it is the C
        cast) and refuses exactly the values that round to an infinity."""
        if not self.is_float or not math.isfinite(x) or self is DType.F64:
            return False
        if self is DType.F32:
            try:
                struct.pack("<f", x)
            except OverflowError:
                return True
            return False
        import numpy as np
        with np.errstate(all="ignore"):
            return not bool(np.isfinite(np.array(x, np.float64).astype(self.np_dtype).astype(np.float64)))

    def __str__(self) -> str:
        return self._value_


FLOAT_DTYPES = tuple(d for d in DType if d.is_float)
BY_MLIR: dict[str, DType] = {d.mlir: d for d in DType}   # MLIR element type -> DType
PLACEMENTS = ("host", "device")


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple[int, ...]
    placement: str = "host"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def volume(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def is_float(self) -> bool:
        return self.dtype.is_float

    def with_shape(self, shape: Iterable[int]) -> TensorType:
        return TensorType(self.dtype, tuple(shape), self.placement)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape, self.placement)

    def __str__(self) -> str:
        return f"Tensor[{self.dtype}, {shape_text(self.shape)}, @{self.placement}]"


def shape_text(shape: Iterable[object]) -> str:
    """A shape as Kina writes it, `[N, 4]`: a size by its name (str), never its Python repr."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclass(frozen=True)
class TupleType:
    items: tuple[Type, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(t) for t in self.items) + ")"


Type = TensorType | TupleType

# An op's static attributes by name, as the checker normalised them against the op's
# AttrSpecs: ints, tuples of ints, floats, enum strings, a dtype name, or a TensorType
# (`dest_ty`).  Each op's row says which attribute holds which, so the values are Any
# here: a union would need a narrowing at every read of a value already validated.
Attrs = dict[str, Any]


def f32(*shape: int) -> TensorType:
    """Shorthand used by tests and passes: a host F32 tensor type."""
    return TensorType(DType.F32, tuple(shape))


def i64(*shape: int) -> TensorType:
    return TensorType(DType.I64, tuple(shape))
