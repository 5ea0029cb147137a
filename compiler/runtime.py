"""Runtime: call the functions of a compiled Kina library with NumPy arrays.

    lib = runtime.load("model.so")          # reads model.json next to it
    logits = lib.storylm0_forward(ids, emb, ...)
    loss, g_emb = lib["step"](ids, emb, out=(loss_buf, g_buf))

Every exported function is `_mlir_ciface_kina_<name>(in descriptors..., out
descriptors...)` (see build.py): one memref descriptor
`{T* allocated; T* aligned; int64 offset; int64 sizes[R]; int64 strides[R]}`
per input, then one per result, all owned by the caller.  The toolchain also
exports `_kina_packed_kina_<name>(void **descriptors)`, which takes the same
pointers from one array: a call is then one ctypes call with one argument,
whatever the number of tensors.  Shapes are static, so the descriptors are
built once; a call checks the arrays, stores their data pointers and calls, and
a repeated call with the same `out=` buffers and arrays skips the checks (see
KinaFunction).  Library functions call no malloc for their results, so repeated
calls do not grow memory.
"""
from __future__ import annotations

import ctypes
import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:  # low-precision NumPy dtypes; only needed for BF16/F8 functions
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    ml_dtypes = None


def _ml(name: str):
    if ml_dtypes is None:
        raise KinaRuntimeError(f"this function needs ml_dtypes for {name} arrays: pip install ml_dtypes")
    return np.dtype(getattr(ml_dtypes, name))


# Kina dtype -> NumPy dtype (and the storage C type used in lib.h).
NUMPY_DTYPES = {
    "F32": lambda: np.dtype(np.float32),
    "F16": lambda: np.dtype(np.float16),
    "BF16": lambda: _ml("bfloat16"),
    "F8E4M3": lambda: _ml("float8_e4m3fn"),
    "F8E5M2": lambda: _ml("float8_e5m2"),
    "I64": lambda: np.dtype(np.int64),
}


def numpy_dtype(kina_dtype: str) -> np.dtype:
    return NUMPY_DTYPES[kina_dtype]()


class KinaRuntimeError(Exception):
    """A library or manifest that cannot be loaded."""


class KinaArgumentError(TypeError):
    """An argument (or out= buffer) of the wrong dtype, shape or count."""


def manifest_path(so_path: str | Path) -> Path:
    return Path(so_path).with_suffix(".json")


# ---- descriptors ---------------------------------------------------------------------
_DESCRIPTOR_TYPES: dict[int, type] = {}


def descriptor_type(rank: int) -> type:
    """ctypes struct of a rank-R memref descriptor (pointers untyped: the dtype is
    checked on the NumPy side)."""
    if rank not in _DESCRIPTOR_TYPES:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        _DESCRIPTOR_TYPES[rank] = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
    return _DESCRIPTOR_TYPES[rank]


def _row_major_strides(shape) -> list[int]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return strides[::-1]


@dataclass(frozen=True)
class TensorSpec:
    name: str            # parameter name, or "result i"
    dtype: str           # Kina dtype name
    shape: tuple[int, ...]
    np_dtype: np.dtype

    def describe(self) -> str:
        return f"Tensor[{self.dtype}, [{', '.join(map(str, self.shape))}]]"


def _describe_array(a: np.ndarray) -> str:
    return f"an array of dtype {a.dtype} and shape {list(a.shape)}"


# ---- argument sets -------------------------------------------------------------------
class _ArgSet:
    """The descriptors of one call, laid out in one int64 block, and the packed array of
    their addresses that `_kina_packed_kina_f(void **)` reads.  `arrays` keeps every bound
    array alive (so its buffer cannot move or be resized while the set exists)."""
    __slots__ = ("block", "packed", "address", "arrays", "result")

    def __init__(self, layout: "_Layout", pointers: list[int], arrays: list | None = None, result=None):
        self.block = layout.template.copy()
        self.block[layout.pointer_words] = pointers          # allocated
        self.block[layout.pointer_words + 1] = pointers      # aligned
        self.packed = (_data_pointer(self.block) + layout.offsets).astype(np.uint64)
        self.address = _data_pointer(self.packed)
        self.arrays, self.result = arrays, result


@dataclass(frozen=True)
class _Layout:
    """One descriptor {allocated, aligned, offset, sizes[R], strides[R]} per tensor, as
    consecutive int64 words: the template, each descriptor's byte offset, and the index
    of its `allocated` word."""
    template: np.ndarray
    offsets: np.ndarray
    pointer_words: np.ndarray

    @staticmethod
    def of(specs: list["TensorSpec"]) -> "_Layout":
        words: list[int] = []
        offsets, slots = [], []
        for spec in specs:
            offsets.append(8 * len(words))
            slots.append(len(words))
            words += [0, 0, 0, *spec.shape, *_row_major_strides(spec.shape)]
        return _Layout(np.array(words, np.int64), np.array(offsets, np.uint64), np.array(slots, np.intp))


def _data_pointer(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _remember(cache: dict, key, value, limit: int) -> None:
    """cache[key] = value, dropping the oldest entry when full (tolerates a concurrent
    caller dropping it first: dict operations are atomic, this pair is not)."""
    while len(cache) >= limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):
            break
    cache[key] = value


# ---- one function -------------------------------------------------------------------
class KinaFunction:
    """A callable bound to one exported function; see the module docstring.

    Two caches keep repeated calls cheap; both hold references to the arrays they
    describe, and a NumPy array with references cannot be resized, so a cached data
    pointer stays valid:
    - per argument slot, the arrays already checked there and their data pointers
      (SLOT_CACHE each): a call that reuses most arrays checks only the new ones;
    - for calls with `out=`, whole argument sets keyed by the identity of every array
      (MEMO_SIZE of them): a repeated call skips straight to the C call.  A training
      loop over preloaded batches that alternates two weight buffers has 2 x batches
      sets.
    An array whose `shape`, `dtype` or `flags.writeable` attribute is reassigned in
    place after a call is not checked again (its buffer and byte size are unchanged);
    `clear_memo()` forgets every cached array."""

    MEMO_SIZE = 256
    SLOT_CACHE = 64

    def __init__(self, cfunc, entry: dict, packed=None):
        self.name: str = entry["name"]
        self.symbol: str = entry["symbol"]
        self.params = [TensorSpec(p["name"], p["dtype"], tuple(p["shape"]), numpy_dtype(p["dtype"]))
                       for p in entry["params"]]
        self.results = [TensorSpec(f"result {i}", r["dtype"], tuple(r["shape"]), numpy_dtype(r["dtype"]))
                        for i, r in enumerate(entry["results"])]
        self._n_params = len(self.params)
        self._layout = _Layout.of(self.params + self.results)
        self._call = self._entry_point(cfunc, packed, len(self._layout.offsets))
        self._memo: dict[tuple, _ArgSet] = {}
        self._slots: list[dict[int, tuple[np.ndarray, int]]] = [{} for _ in self.params + self.results]
        self._scratch = _ArgSet(self._layout, [0] * len(self._layout.offsets))
        self._scratch_lock = threading.Lock()
        self.__doc__ = self.signature()

    @staticmethod
    def _entry_point(cfunc, packed, n: int):
        """A callable taking the address of the packed pointer array."""
        if packed is not None:
            packed.argtypes, packed.restype = [ctypes.c_void_p], None
            return packed
        # Library built without packed entry points: spread the array into n arguments.
        cfunc.argtypes, cfunc.restype = [ctypes.c_void_p] * n, None
        array_type = ctypes.c_void_p * n
        return lambda address: cfunc(*array_type.from_address(address))

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        res = [r.describe() for r in self.results]
        ret = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
        return f"{self.name}({params}) -> {ret}"

    def _coerce(self, value, spec: TensorSpec, what: str) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value, dtype=spec.np_dtype)
            except (TypeError, ValueError) as e:
                raise KinaArgumentError(f"{self.name}: {what} `{spec.name}` expects {spec.describe()}, "
                                        f"got {type(value).__name__} that does not convert ({e})") from None
        if value.dtype != spec.np_dtype or value.shape != spec.shape:
            raise KinaArgumentError(f"{self.name}: {what} `{spec.name}` expects {spec.describe()} "
                                    f"(NumPy dtype {spec.np_dtype}, shape {list(spec.shape)}), "
                                    f"got {_describe_array(value)}")
        return value

    def __call__(self, *args, out=None):
        if out is not None and len(args) == self._n_params:
            # Fast path: the same array objects as a checked earlier call.
            outs = out if type(out) is tuple else (out,) if type(out) is np.ndarray else tuple(out)
            memo = self._memo.get(tuple(map(id, args + outs)))
            if memo is not None:
                self._call(memo.address)
                return memo.result
        return self._checked_call(args, out)

    def _checked_call(self, args: tuple, out):
        if len(args) != self._n_params:
            raise KinaArgumentError(f"{self.name} takes {self._n_params} argument(s) "
                                    f"({', '.join(p.name for p in self.params) or 'none'}), got {len(args)}")
        outputs = self._outputs(out)
        given = list(args) + ([] if out is None else outputs)
        bound, pointers = [], []
        for slot, arr in enumerate(given):
            arr, ptr = self._checked(slot, arr)
            bound.append(arr)
            pointers.append(ptr)
        if out is None:
            pointers += [_data_pointer(o) for o in outputs]
        result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        if out is not None and all(a is b for a, b in zip(bound, given)):
            memo = _ArgSet(self._layout, pointers, bound, result)
            _remember(self._memo, tuple(map(id, given)), memo, self.MEMO_SIZE)
            self._call(memo.address)
        else:
            # Not memoised (fresh outputs, converted inputs): one scratch set, taken in turns.
            with self._scratch_lock:
                block, words = self._scratch.block, self._layout.pointer_words
                block[words] = pointers
                block[words + 1] = pointers
                self._call(self._scratch.address)
        return result

    def _checked(self, slot: int, arr) -> tuple[np.ndarray, int]:
        """(the array to bind, its data pointer): from the slot's cache, or checked now.
        Inputs may be converted (lists, other dtypes, strided views); out= buffers may not."""
        hit = self._slots[slot].get(id(arr))
        if hit is not None and hit[0] is arr:
            return hit
        if slot < self._n_params:
            checked = self._input(arr, self.params[slot])
        else:
            checked = self._output(arr, self.results[slot - self._n_params])
        entry = (checked, _data_pointer(checked))
        if checked is arr:
            _remember(self._slots[slot], id(arr), entry, self.SLOT_CACHE)
        return entry

    def clear_memo(self) -> None:
        """Forget the memoised argument sets and checked arrays (and release them)."""
        self._memo.clear()
        for cache in self._slots:
            cache.clear()

    def _input(self, arr, spec: TensorSpec) -> np.ndarray:
        if (type(arr) is not np.ndarray or arr.dtype != spec.np_dtype or arr.shape != spec.shape
                or not arr.flags.c_contiguous):
            arr = np.ascontiguousarray(self._coerce(arr, spec, "parameter"))
        return arr

    def _output(self, o, r: TensorSpec) -> np.ndarray:
        if not isinstance(o, np.ndarray):
            raise KinaArgumentError(f"{self.name}: out= {r.name} must be a NumPy array, got {type(o).__name__}")
        self._coerce(o, r, "out=")
        if not (o.flags.c_contiguous and o.flags.writeable):
            raise KinaArgumentError(f"{self.name}: out= {r.name} must be a writeable C-contiguous array")
        return o

    def _outputs(self, out) -> list:
        """Fresh result arrays (out=None) or the given out= buffers (checked per slot)."""
        if out is None:
            return [np.empty(r.shape, r.np_dtype) for r in self.results]
        outs = [out] if isinstance(out, np.ndarray) else list(out)
        if len(outs) != len(self.results):
            raise KinaArgumentError(f"{self.name}: out= needs {len(self.results)} array(s), got {len(outs)}")
        return outs

    def __repr__(self) -> str:
        return f"<KinaFunction {self.signature()}>"


# ---- the library ----------------------------------------------------------------------
class Library:
    """A loaded Kina library: `lib.fn(...)`, `lib["fn"](...)`, `lib.functions`."""

    def __init__(self, so_path: str | Path, manifest: dict):
        self.path = Path(so_path)
        self.manifest = manifest
        try:
            self._dll = ctypes.CDLL(str(self.path.resolve()))
        except OSError as e:
            raise KinaRuntimeError(f"cannot load {self.path}: {e}") from None
        self.functions: dict[str, KinaFunction] = {}
        for entry in manifest["functions"]:
            try:
                cfunc = getattr(self._dll, entry["symbol"])
            except AttributeError:
                raise KinaRuntimeError(f"{self.path} does not export {entry['symbol']} "
                                       f"(function `{entry['name']}` of its manifest); rebuild it") from None
            packed = getattr(self._dll, _packed_symbol(entry["symbol"]), None)
            self.functions[entry["name"]] = KinaFunction(cfunc, entry, packed)

    def __getitem__(self, name: str) -> KinaFunction:
        try:
            return self.functions[name]
        except KeyError:
            raise KeyError(f"{self.path.name} has no function `{name}` "
                           f"(it has: {', '.join(self.functions) or 'none'})") from None

    def __getattr__(self, name: str) -> KinaFunction:
        if name.startswith("_") or "functions" not in self.__dict__:
            raise AttributeError(name)
        try:
            return self.functions[name]
        except KeyError:
            raise AttributeError(f"{self.path.name} has no function `{name}` "
                                 f"(it has: {', '.join(self.functions) or 'none'})") from None

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __repr__(self) -> str:
        return f"<Library {self.path.name}: {', '.join(self.functions)}>"


def _packed_symbol(symbol: str) -> str:
    """The packed entry point the toolchain adds next to `_mlir_ciface_kina_f`
    (compiler/toolchain.py: `_kina_packed_kina_f(void **descriptors)`)."""
    prefix = "_mlir_ciface_"
    return "_kina_packed_" + symbol[len(prefix):] if symbol.startswith(prefix) else symbol + "_packed"


def load(so_path: str | Path, manifest: str | Path | dict | None = None) -> Library:
    """Load a library built by `kinac build` and its manifest (default: <so>.json)."""
    so_path = Path(so_path)
    if not so_path.exists():
        raise KinaRuntimeError(f"no such library: {so_path}")
    if not isinstance(manifest, dict):
        mpath = Path(manifest) if manifest else manifest_path(so_path)
        try:
            manifest = json.loads(mpath.read_text())
        except FileNotFoundError:
            raise KinaRuntimeError(f"{so_path} has no manifest {mpath}; build it with `kinac build`") from None
        except json.JSONDecodeError as e:
            raise KinaRuntimeError(f"manifest {mpath} is not valid JSON: {e}") from None
    if "functions" not in manifest:
        raise KinaRuntimeError(f"manifest of {so_path} has no 'functions' list")
    return Library(so_path, manifest)
