"""Kina types: `Tensor[DTYPE, SHAPE, @PLACEMENT]` and tuples of them.

Types are immutable values; `str(t)` is the spelling used in every diagnostic
and hover (`Tensor[F32, [1, 4, 8], @host]`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class DType(Enum):
    F16 = "F16"
    BF16 = "BF16"
    F32 = "F32"
    F8E4M3 = "F8E4M3"
    F8E5M2 = "F8E5M2"
    I64 = "I64"

    @property
    def is_float(self) -> bool:
        return self is not DType.I64

    def __str__(self) -> str:
        return self.value


FLOAT_DTYPES = tuple(d for d in DType if d.is_float)
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

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.dtype, tuple(shape), self.placement)

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape, self.placement)

    def __str__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"Tensor[{self.dtype}, [{dims}], @{self.placement}]"


@dataclass(frozen=True)
class TupleType:
    items: tuple["Type", ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(t) for t in self.items) + ")"


Type = TensorType | TupleType


def f32(*shape: int) -> TensorType:
    """Shorthand used by tests and passes: a host F32 tensor type."""
    return TensorType(DType.F32, tuple(shape))


def i64(*shape: int) -> TensorType:
    return TensorType(DType.I64, tuple(shape))
