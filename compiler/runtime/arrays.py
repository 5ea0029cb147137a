"""Kina arrays in .npz files (`kinac run --save`) that round-trip every dtype.

NumPy's .npz format has no BF16 or F8 dtypes (np.save writes ml_dtypes arrays as
raw `|V2` / `|V1` void records that np.load cannot turn back into numbers).  So:

- F32, F16 and I64 arrays are stored as themselves;
- BF16, F8E4M3 and F8E5M2 arrays are stored as float32, which holds every one of
  their values exactly (NaN, infinities and -0.0 included), so plain
  `np.load(path)["result_0"]` reads their values with no extra package;
- the entry `kina_dtypes` (a JSON string) maps every array's name to its Kina
  dtype, and `load_npz` restores the declared dtype from it, bit for bit.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from compiler.core.types import DType

# The NumPy array of one Kina tensor (its dtype is the tensor's: any NumPy or ml_dtypes dtype).
Array = NDArray[Any]
DTYPES_KEY = "kina_dtypes"

# Where an array's data starts: a cache line, one AVX-512 vector.  torch's and JAX's CPU
# buffers start there; NumPy's (glibc malloc's) 16 bytes into one, where a row's every
# vector load and store of a compiled kernel crosses two lines (a [512, 512] @ [512, 8192]
# product into such a buffer ran 4-9% slower, benchmarks/README.md).
ALIGN = 64
# Below this an array is plain np.empty: its few vectors gain nothing, the extra steps cost ~1 us.
ALIGN_MIN_BYTES = 4096


def empty(shape: tuple[int, ...], dtype: Any) -> Array:
    """An uninitialised C-contiguous array of `shape` whose data starts on an ALIGN-byte
    boundary (from ALIGN_MIN_BYTES up): the fresh results of a call, and what a caller
    should allocate its out= buffers and long-lived inputs with."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < ALIGN_MIN_BYTES:
        return np.empty(shape, dtype)
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    aligned: Array = raw[start:start + nbytes].view(dtype).reshape(shape)
    return aligned


def _stored(a: np.ndarray, dtype: DType) -> np.ndarray:
    return a if dtype.buffer_formats else a.astype(np.float32)


def npz_path(path: str | Path) -> Path:
    """The file np.savez writes for `path` (it appends .npz when missing)."""
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def save_npz(path: str | Path, arrays: dict[str, np.ndarray], dtypes: dict[str, DType]) -> Path:
    """Write `arrays` (name -> array of the Kina dtype dtypes[name]); returns the path written."""
    if DTYPES_KEY in arrays:
        raise ValueError(f"{DTYPES_KEY!r} is reserved for the dtype table")
    stored = {name: _stored(np.asarray(a, dtypes[name].np_dtype), dtypes[name]) for name, a in arrays.items()}
    table = json.dumps({name: dtypes[name].value for name in arrays})
    target = npz_path(path)
    members: dict[str, Any] = {**stored, DTYPES_KEY: np.array(table)}   # (numpy's stub types **kwds oddly)
    np.savez(target, **members)
    return target


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a file written by save_npz, each in its Kina dtype."""
    with np.load(path, allow_pickle=False) as f:
        table = json.loads(str(f[DTYPES_KEY])) if DTYPES_KEY in f.files else {}
        return {name: f[name].astype(DType.named(table[name]).np_dtype) if name in table else f[name]
                for name in f.files if name != DTYPES_KEY}
