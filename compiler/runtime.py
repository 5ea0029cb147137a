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
whatever the number of tensors.

The runtime never keeps a user's array alive: it remembers argument sets by
the identity of their arrays through weak references (see KinaFunction), and
checks every array on every call.  Library functions call no malloc for their
results, so repeated calls do not grow memory.
"""
from __future__ import annotations

import ctypes
import json
import operator
import threading
import weakref
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


# ---- data pointers ---------------------------------------------------------------------
def _word_at(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


def _find_data_offset() -> int | None:
    """Byte offset of the data pointer inside an ndarray object (NumPy's
    PyArrayObject_fields.data, right after the object header; part of NumPy's C ABI),
    found by looking for the known pointers of two probe arrays (one a view at a
    non-zero offset).  None if not found: then __array_interface__ is used."""
    probes = (np.empty(3, np.float64), np.arange(16, dtype=np.int32)[5:])
    for offset in range(8, 64, 8):   # inside the object: an ndarray is > 64 bytes
        if all(_word_at(id(p) + offset) == p.__array_interface__["data"][0] for p in probes):
            return offset
    return None


_DATA_OFFSET = _find_data_offset()


def _data_pointers(arrays, _at=ctypes.c_void_p.from_address, _off=_DATA_OFFSET) -> list[int]:
    """The address of each array's first element: one word read (~0.15 us) where the
    offset is known, else `__array_interface__` (~1 us: it builds a dict)."""
    if _off is None:
        return [a.__array_interface__["data"][0] for a in arrays]
    return [_at(id(a) + _off).value or 0 for a in arrays]


# ---- argument sets -------------------------------------------------------------------
# The per-call check of an array, one C-level attribute read: its dtype, shape and
# flags word (C-contiguous, writeable, aligned, owns data).  A remembered set keeps the
# probes of its arrays taken when they passed the full checks; a call whose arrays
# probe the same passes them again (C-contiguous with the same shape means the same
# strides, up to dimensions of size 1, where strides are never used).
_PROBE = operator.attrgetter("dtype", "shape", "flags.num")


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


class _ArgSet:
    """The descriptors of one call in one int64 block, and the packed array of their
    addresses that `_kina_packed_kina_f(void **)` reads.  A remembered set holds weak
    references to its arrays (`refs`), whose callbacks forget the set when one of them
    dies: its raw pointers are never used after that, and while the references exist
    NumPy refuses to resize the arrays, so the pointers stay valid.  `lock` guards the
    output words of a set reused by calls with fresh outputs; `probes` are the _PROBE
    values of its arrays when they were checked."""
    __slots__ = ("block", "packed", "address", "refs", "lock", "probes")

    def __init__(self, layout: _Layout, pointers: list[int]):
        self.block = layout.template.copy()
        self.block[layout.pointer_words] = pointers          # allocated
        self.block[layout.pointer_words + 1] = pointers      # aligned
        self.packed = (_data_pointers([self.block])[0] + layout.offsets).astype(np.uint64)
        self.address = _data_pointers([self.packed])[0]
        self.refs: tuple = ()
        self.lock = threading.Lock()
        self.probes: list = []


def _remember(cache: dict, key, value, limit: int) -> None:
    """cache[key] = value, dropping the oldest entry when full (tolerates a concurrent
    caller dropping it first: dict operations are atomic, this pair is not)."""
    while len(cache) >= limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):
            break
    cache[key] = value


def _watch(cache: dict, key, arrays) -> tuple:
    """Weak references to `arrays` whose callbacks drop cache[key] when one of them dies.
    A callback runs while its array is being freed, before the array's id can be reused,
    so a lookup by ids never finds the set of a dead array."""
    def forget(_ref, cache=cache, key=key):
        cache.pop(key, None)
    return tuple(weakref.ref(a, forget) for a in arrays)


# ---- one function -------------------------------------------------------------------
class KinaFunction:
    """A callable bound to one exported function; see the module docstring.

    Every call checks every array: dtype, shape and C-contiguity of each, and that
    out= buffers are writeable (one _PROBE read each when the set is remembered).  What is expensive and depends only on the
    identity of the arrays, the descriptor block with their data pointers, is
    remembered per argument set (MEMO_SIZE sets for out= calls, as many input sets for
    calls with fresh outputs), keyed by the arrays' ids and held by weak references
    only (see _ArgSet): a training loop that rebinds its weights to new arrays every
    step leaves nothing behind.  An array is rechecked in full (and rejected with
    KinaArgumentError) when its shape, strides, dtype or writeable flag was reassigned
    in place.  Inputs may be converted (lists, strided views); such calls bind the
    converted copies for that call only."""

    MEMO_SIZE = 256

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
        self._fresh_shapes = [r.shape for r in self.results]
        self._fresh_dtypes = [r.np_dtype for r in self.results]
        out_words = self._layout.pointer_words[self._n_params:]
        self._out_words = np.concatenate([out_words, out_words + 1])   # allocated, then aligned
        self._memo: dict[tuple, _ArgSet] = {}         # out= calls: ids of inputs and outputs
        self._input_sets: dict[tuple, _ArgSet] = {}   # fresh outputs: ids of inputs
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

    # -- calls: the fast path is a dict lookup, the layout checks and one ctypes call --
    def __call__(self, *args, out=None):
        if out is None:
            return self._call_fresh(args)
        outs = out if type(out) is tuple else (out,) if isinstance(out, np.ndarray) else _as_tuple(out)
        given = args + outs
        argset = self._memo.get(tuple(map(id, given)))
        # A set found by ids holds exactly these (live) objects, whose type cannot change;
        # their dtype, shape, strides and flags can, so they are probed on every call.
        if argset is None or list(map(_PROBE, given)) != argset.probes:
            argset, _keep = self._bind(args, outs, self._memo)
        self._call(argset.address)
        return outs[0] if len(outs) == 1 else outs

    def _call_fresh(self, args: tuple):
        """out=None: new result arrays, their pointers written into the input set's block."""
        argset = self._input_sets.get(tuple(map(id, args)))
        if argset is None or list(map(_PROBE, args)) != argset.probes:
            argset, _keep = self._bind(args, None, self._input_sets)
        outs = list(map(np.empty, self._fresh_shapes, self._fresh_dtypes))
        pointers = _data_pointers(outs)
        if argset.lock.acquire(False):
            try:
                argset.block[self._out_words] = pointers + pointers
                self._call(argset.address)
            finally:
                argset.lock.release()
        else:   # another thread is calling with the same inputs: a private copy of the set
            inputs = argset.block[self._layout.pointer_words[:self._n_params]]
            mine = _ArgSet(self._layout, inputs.tolist() + pointers)
            self._call(mine.address)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _bind(self, args: tuple, outs: tuple | None, cache: dict) -> tuple[_ArgSet, list]:
        """Check every array (converting inputs where allowed) and build their argument
        set; remember it in `cache` when every array was bound as given.  Returns the set
        and the bound arrays, which the caller keeps alive until its call returns."""
        if len(args) != self._n_params:
            raise KinaArgumentError(f"{self.name} takes {self._n_params} argument(s) "
                                    f"({', '.join(p.name for p in self.params) or 'none'}), got {len(args)}")
        given = list(args)
        bound = [self._input(a, spec) for a, spec in zip(args, self.params)]
        if outs is not None:
            if len(outs) != len(self.results):
                raise KinaArgumentError(f"{self.name}: out= needs {len(self.results)} array(s), got {len(outs)}")
            given += outs
            bound += [self._output(o, spec) for o, spec in zip(outs, self.results)]
        remembered = all(map(operator.is_, bound, given))
        if remembered:   # weak references first: from then on NumPy will not resize them
            key = tuple(map(id, given))
            refs = _watch(cache, key, bound)
        pointers = _data_pointers(bound) + [0] * (len(self._layout.offsets) - len(bound))
        argset = _ArgSet(self._layout, pointers)
        if remembered:
            argset.refs, argset.probes = refs, list(map(_PROBE, given))
            _remember(cache, key, argset, self.MEMO_SIZE)
        return argset, bound

    def clear_memo(self) -> None:
        """Forget every remembered argument set."""
        self._memo.clear()
        self._input_sets.clear()

    # -- full checks ---------------------------------------------------------------------
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

    def __repr__(self) -> str:
        return f"<KinaFunction {self.signature()}>"


def _as_tuple(out) -> tuple:
    try:
        return tuple(out)
    except TypeError:
        raise KinaArgumentError(f"out= takes an array or a sequence of arrays, got {type(out).__name__}") from None


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
        # `lib.fn` as a plain attribute (no __getattr__ call per step of a loop), unless
        # the name is taken by the Library itself (then it is lib["fn"]).
        for name, fn in self.functions.items():
            if not name.startswith("_") and name not in self.__dict__ and not hasattr(type(self), name):
                self.__dict__[name] = fn

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
    (compiler/pipelines.py: `_kina_packed_kina_f(void **descriptors)`)."""
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
