"""Runtime: call the functions of a compiled Kina library with NumPy arrays.

    lib = runtime.load("model.so")          # reads model.json next to it
    logits = lib.storylm0_forward(ids, emb, ...)
    loss, g_emb = lib["step"](ids, emb, out=(loss_buf, g_buf))

Every exported function `_mlir_ciface_kina_<name>(in descriptors..., out
descriptors...)` (see build.py) takes one memref descriptor
`{T* allocated; T* aligned; int64 offset; int64 sizes[R]; int64 strides[R]}`
per input, then one per result, all owned by the caller.  The toolchain also
exports `_kina_packed_kina_<name>(void **descriptors)` (compiler/backend/entry_points.py),
which takes the same pointers from one array; the runtime calls that one.

Loading (runtime/loader.py) checks that the manifest describes these very bytes
(its `library_sha256`) and dlopens a private copy, so a library rebuilt at the
same path and loaded again in the same process runs the new code.

Everything that depends only on the signature is prepared once per function: the
descriptors with their offsets, sizes and strides (the data pointers are the only
words written per call) and the packed entry point.  A call then goes one of two
ways, both checking every array on every call:

- fast: the C helper compiler.runtime._fastcall checks each array through the buffer
  protocol (dtype, shape, C-contiguity, alignment, writeable outputs), every
  element of an I64 index parameter against the bound the manifest records, and
  that no output overlaps another array; it writes the data pointers into a
  per-call copy of the descriptors and calls the entry point; on the first array
  that does not match it calls nothing and returns;
- checked: the Python checks below, which convert what may be converted (lists
  of numbers, non-contiguous views are copied; no float -> I64, None or str
  conversions), raise KinaArgumentError naming the parameter otherwise (and
  KinaIndexError naming a bad index value), copy an input that an out= array
  overlaps and refuse two outputs that overlap, then a ctypes call.  Used when
  the fast path declines a call, for BF16/F8 functions (ml_dtypes arrays export
  no buffer format) and when the extension is not built.

The runtime keeps no reference to any array after a call and shares no mutable
state between calls, so calls from several threads are safe.  Library functions
call no malloc for their results, so repeated calls do not grow memory.
Multithreaded (-O2) kernels run on LLVM's OpenMP runtime, which re-creates its
threads in a child after fork(): a forked child calls them like its parent.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from compiler.backend.entry_points import BAD_SIZES, BOUNDS_FAILED, packed_symbol
from compiler.core.types import DType
from compiler.runtime.arrays import Array, load_npz, save_npz
from compiler.runtime.loader import (
    KinaRuntimeError,
    check_abi,
    last_error_function,
    load_manifest,
    manifest_path,
    open_library,
)

try:  # the C fast path, built by `pip install -e .` (setup.py)
    from compiler.runtime import _fastcall
except ImportError:  # pragma: no cover - exercised by the tests with fastcall=False
    _fastcall = None  # type: ignore[assignment]  # (the slow path then runs every call)

FASTCALL_AVAILABLE = _fastcall is not None

if TYPE_CHECKING:
    from ctypes import _NamedFuncPointer  # what a CDLL attribute is (typeshed's name)

# A parsed JSON object: the manifest (compiler/build.py writes it) and its function entries.
JSONObject = dict[str, Any]

# Kina dtype name -> NumPy dtype, and the dtypes whose arrays have a standard buffer
# format ('f', 'e', 'q'/'l'), the only ones compiler.runtime._fastcall checks: types.DType.
NUMPY_DTYPES = {d.value: d for d in DType}
FASTCALL_DTYPES = frozenset(d.value for d in DType if d.buffer_formats)


# The runtime's public API (what user code imports from compiler.runtime); the errors,
# the manifest helpers and load_npz / save_npz are defined in the modules that need them.
__all__ = ["load", "Library", "KinaFunction", "KinaArgumentError", "KinaIndexError", "KinaRuntimeError",
           "numpy_dtype", "manifest_path", "load_manifest", "load_npz", "save_npz"]


def numpy_dtype(kina_dtype: str) -> np.dtype[Any]:
    try:
        return DType.named(kina_dtype).np_dtype
    except ValueError:
        raise KinaRuntimeError(f"unknown Kina dtype {kina_dtype!r} in the manifest") from None
    except ImportError as e:   # pragma: no cover - ml_dtypes is a dependency
        raise KinaRuntimeError(f"{kina_dtype} arrays need ml_dtypes ({e}): pip install ml_dtypes") from None


class KinaArgumentError(TypeError):
    """An argument (or out= buffer) of the wrong dtype, shape or count, or aliased outputs."""


class KinaIndexError(KinaArgumentError, IndexError):
    """An I64 argument holding an index outside the range its uses allow (gather, take_along_axis)."""




# ---- descriptors ---------------------------------------------------------------------
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


def _describe_array(a: Array) -> str:
    return f"an array of dtype {a.dtype} and shape {list(a.shape)}"


@dataclass(frozen=True)
class Descriptors:
    """The descriptors of one call, {allocated, aligned, offset, sizes[R], strides[R]}
    per tensor, as consecutive int64 words: `template` has every word but the data
    pointers filled in; `words[i]` is the index of tensor i's first word (`allocated`,
    then `aligned`).  Each call fills its own copy, so concurrent calls share nothing."""
    template: bytes
    words: tuple[int, ...]

    @staticmethod
    def of(specs: list[TensorSpec]) -> Descriptors:
        block: list[int] = []
        words = []
        for spec in specs:
            words.append(len(block))
            block += [0, 0, 0, *spec.shape, *_row_major_strides(spec.shape)]
        return Descriptors(np.array(block, np.int64).tobytes(), tuple(words))


# ---- one function -------------------------------------------------------------------
class KinaFunction:
    """A callable bound to one exported function; see the module docstring.

    f(*inputs) returns new result arrays (one array, or a tuple of several);
    f(*inputs, out=buffers) writes into `buffers` (an array or a sequence of arrays,
    C-contiguous, writeable, of the result types, overlapping no other output; an input
    they overlap is read from a copy) and returns them."""

    def __init__(self, packed: _NamedFuncPointer, entry: JSONObject, fastcall: bool = True,
                 threaded: bool = False, last_error: Callable[[], bytes | None] | None = None) -> None:
        self.name: str = entry["name"]
        self.symbol: str = entry["symbol"]
        self.params = [TensorSpec(p["name"], p["dtype"], tuple(p["shape"]), numpy_dtype(p["dtype"]),
                                  _index_bound(self.name, p)) for p in entry["params"]]
        self.results = [TensorSpec(f"result {i}", r["dtype"], tuple(r["shape"]), numpy_dtype(r["dtype"]))
                        for i, r in enumerate(entry["results"])]
        self._descriptors = Descriptors.of(self.params + self.results)
        self._fresh_shapes = [r.shape for r in self.results]
        self._fresh_dtypes = [r.np_dtype for r in self.results]
        self._bounded = [(i, p) for i, p in enumerate(self.params) if p.bound is not None]
        self._slots = [(int(np.prod(s.shape, dtype=np.int64)) * s.np_dtype.itemsize, k)   # (bytes, index)
                       for k, s in enumerate(self.params + self.results)]
        self.threaded = threaded   # its library runs kernels on the OpenMP runtime's threads
        packed.argtypes, packed.restype = [ctypes.c_void_p], ctypes.c_int32   # entry_points: 0, or an error code
        self._packed = packed
        self._last_error = last_error
        self._fast = self._fast_entry(packed) if fastcall else None
        self.__doc__ = self.signature()

    def _fast_entry(self, packed: _NamedFuncPointer) -> _fastcall.Entry | None:
        """The compiler.runtime._fastcall.Entry of this function, or None where the fast path
        does not apply (extension not built, a dtype without a buffer format)."""
        specs = self.params + self.results
        if _fastcall is None or any(s.dtype not in FASTCALL_DTYPES for s in specs):
            return None
        slots = []
        for i, (s, word) in enumerate(zip(specs, self._descriptors.words)):
            d = DType.named(s.dtype)
            slots.append((d.buffer_formats, d.itemsize, i >= len(self.params), s.shape, word,
                          -1 if s.bound is None else s.bound))
        address = ctypes.cast(packed, ctypes.c_void_p).value
        return _fastcall.Entry(address, self._descriptors.template, tuple(slots), np.ndarray)

    @property
    def uses_fastcall(self) -> bool:
        return self._fast is not None

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        res = [r.describe() for r in self.results]
        ret = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
        return f"{self.name}({params}) -> {ret}"

    # -- a call: the C fast path, else the Python checks and a ctypes call -------------
    def __call__(self, *args: object, out: object = None) -> Array | tuple[Array, ...]:
        outs: tuple[object, ...]
        if out is None:
            outs = tuple(map(np.empty, self._fresh_shapes, self._fresh_dtypes))
        else:
            outs = out if type(out) is tuple else (out,) if isinstance(out, np.ndarray) else _as_tuple(out)
        # _fastcall.call: -1 after a call that returned 0, >= 0 when it declined (the Python
        # checks then say why), -1 - code after a call that returned an error code.
        declined = -1 if self._fast is None else _fastcall.call(self._fast, args + outs)
        if self._fast is None or declined >= 0:
            status = self._call_checked(args, outs, out is None)
        else:
            status = -1 - declined
        if status:
            raise self._library_error(status)
        # every output is an array of its result's type now (checked by either path)
        results = cast(tuple[Array, ...], outs)
        return results[0] if len(results) == 1 else results

    def _call_checked(self, args: tuple[object, ...], outs: tuple[object, ...], fresh: bool = False) -> int:
        """Check (and convert) every array, then call through ctypes; returns the entry
        point's code.  `fresh`: the outputs were allocated by this call (nothing can alias them)."""
        if len(args) != len(self.params):
            raise KinaArgumentError(f"{self.name} takes {len(self.params)} argument(s) "
                                    f"({', '.join(p.name for p in self.params) or 'none'}), got {len(args)}")
        if len(outs) != len(self.results):
            raise KinaArgumentError(f"{self.name}: out= needs {len(self.results)} array(s), got {len(outs)}")
        arrays = [self._input(a, spec) for a, spec in zip(args, self.params)]
        arrays += [self._output(o, spec) for o, spec in zip(outs, self.results)]
        for i, spec in self._bounded:
            self._check_indices(arrays[i], spec)
        addresses = [a.ctypes.data for a in arrays]
        if not fresh:
            self._unalias(arrays, addresses)
        return self._call_ctypes(arrays, addresses)

    def _library_error(self, status: int) -> Exception:
        """The exception for a code the entry point returned (compiler/backend/entry_points.py)."""
        if status == BOUNDS_FAILED:
            raw = self._last_error() if self._last_error is not None else None
            message = raw.decode(errors="replace") if raw else "an index out of bounds"
            return KinaIndexError(f"{self.name}: {message} (an index the runtime could not check before the call, "
                                  f"computed or constant inside the library, is outside the range of the tensor "
                                  f"it indexes; the outputs hold no result)")
        specs = self.params + self.results
        if BAD_SIZES <= status < BAD_SIZES + len(specs):
            spec = specs[status - BAD_SIZES]
            what = "parameter" if status - BAD_SIZES < len(self.params) else "out="
            return KinaRuntimeError(f"{self.name}: the library was not compiled for {what} `{spec.name}` as "
                                    f"{spec.describe()} (the manifest's shape); the library is the authority: "
                                    f"rebuild with `kinac build` and keep the .so and its .json together")
        return KinaRuntimeError(f"{self.name}: the library returned the unknown error code {status}")

    def _call_ctypes(self, arrays: list[Array], addresses: list[int]) -> int:
        """Fill a private copy of the descriptors with the arrays' data pointers and
        call the packed entry point; `arrays` keeps the arrays alive until it returns."""
        block = (ctypes.c_int64 * (len(self._descriptors.template) // 8)).from_buffer_copy(
            self._descriptors.template)
        base = ctypes.addressof(block)
        packed = (ctypes.c_void_p * len(arrays))()
        for i, (address, word) in enumerate(zip(addresses, self._descriptors.words)):
            block[word] = block[word + 1] = address     # allocated, aligned
            packed[i] = base + 8 * word
        return int(self._packed(packed))

    # -- the Python checks: the same as the C helper's, with precise errors ---------------
    def _coerce(self, value: object, spec: TensorSpec, what: str) -> Array:
        if not isinstance(value, np.ndarray):
            value = self._convert(value, spec, what)
        if value.dtype != spec.np_dtype or value.shape != spec.shape:
            raise KinaArgumentError(f"{self.name}: {what} `{spec.name}` expects {spec.describe()} "
                                    f"(NumPy dtype {spec.np_dtype}, shape {list(spec.shape)}), "
                                    f"got {_describe_array(value)}")
        return value

    def _convert(self, value: object, spec: TensorSpec, what: str) -> Array:
        """A non-array argument as an array.  Python numbers and (nested) lists / tuples of
        them convert to the declared dtype when nothing is lost in kind: integers to I64,
        integers or floats to a float dtype, bools to Bool.  Never a float to I64 (no truncation), None
        (no NaN) or a str (no parsing); any other object must convert to exactly the dtype."""
        expects = f"{self.name}: {what} `{spec.name}` expects {spec.describe()}"
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as e:
            raise KinaArgumentError(f"{expects}, got {_describe_value(value)} that does not convert ({e})") \
                from None
        if not isinstance(value, (list, tuple, int, float)) or isinstance(value, bool):
            if arr.dtype != spec.np_dtype:
                raise KinaArgumentError(f"{expects}, got {_describe_value(value)}"
                                        + ("" if arr.dtype.kind in "OUS" else f" (NumPy dtype {arr.dtype})"))
            return arr
        wanted = {"I64": "iu", "Bool": "b"}.get(spec.dtype, "iuf")   # Bool: lists of True / False
        if arr.dtype.kind not in wanted:
            why = (" (no conversion of floats to I64 indices)" if spec.dtype == "I64" and arr.dtype.kind == "f"
                   else "")
            raise KinaArgumentError(f"{expects}, got {_describe_value(value)} holding "
                                    f"{_KIND_NAMES.get(arr.dtype.kind, str(arr.dtype))} values{why}")
        if arr.dtype.kind == "u" and arr.size and spec.dtype == "I64" and arr.max() > np.iinfo(np.int64).max:
            raise KinaArgumentError(f"{expects}, got integers beyond the I64 range")
        with np.errstate(all="ignore"):   # a number beyond the dtype rounds (to inf) as NumPy rounds it, silently
            return arr.astype(spec.np_dtype)

    def _input(self, value: object, spec: TensorSpec) -> Array:
        """An input as given, or a C-contiguous aligned copy (lists, strided views)."""
        arr = self._coerce(value, spec, "parameter")
        if not (arr.flags.c_contiguous and arr.flags.aligned):
            arr = np.require(arr, requirements=["C", "A"])
        return arr

    def _output(self, o: object, r: TensorSpec) -> Array:
        if not isinstance(o, np.ndarray):
            raise KinaArgumentError(f"{self.name}: out= {r.name} must be a NumPy array, got {type(o).__name__}")
        self._coerce(o, r, "out=")
        if not (o.flags.c_contiguous and o.flags.writeable and o.flags.aligned):
            raise KinaArgumentError(f"{self.name}: out= {r.name} must be a writeable, aligned, "
                                    f"C-contiguous array")
        return o

    def _check_indices(self, ids: Array, spec: TensorSpec) -> None:
        """Every element of an I64 index parameter in [0, bound): the library's own bounds
        check (cf.assert) would abort the whole process."""
        assert spec.bound is not None    # only bounded parameters are checked
        if not (ids.view(np.uint64) >= spec.bound).any():    # negative ids wrap to huge
            return
        bad = (ids < 0) | (ids >= spec.bound)
        if bad.any():
            where = np.unravel_index(int(np.flatnonzero(bad)[0]), ids.shape)
            raise KinaIndexError(f"{self.name}: parameter `{spec.name}` holds index {int(ids[where])} at "
                                 f"{list(map(int, where))}, outside [0, {spec.bound}) (it indexes a "
                                 f"gather or take_along_axis; {int(bad.sum())} bad element(s))")

    def _unalias(self, arrays: list[Array], addresses: list[int]) -> None:
        """Outputs overlapping each other are refused (both results cannot be kept); an input
        an output overlaps is replaced by a copy, since the library may write that output
        before it has read all of the input (`layer(h, w, out=h)` then works as written).
        Every array is C-contiguous here, so [address, address + nbytes) is exactly its
        memory: one sweep over the spans sorted by start finds every overlap."""
        n_in = len(self.params)
        spans = sorted([(addr, addr + size, k) for addr, (size, k) in zip(addresses, self._slots) if size])
        for i, (_, hi, k) in enumerate(spans):
            for lo2, _, k2 in spans[i + 1:]:
                if lo2 >= hi:
                    break
                if k >= n_in and k2 >= n_in:
                    a, b = sorted((k - n_in, k2 - n_in))
                    raise KinaArgumentError(f"{self.name}: out= result {a} and result {b} share memory; "
                                            f"pass separate arrays")
                if (k < n_in) != (k2 < n_in):
                    copy = min(k, k2)
                    arrays[copy] = arrays[copy].copy()
                    addresses[copy] = arrays[copy].ctypes.data

    def __repr__(self) -> str:
        return f"<KinaFunction {self.signature()}>"


_KIND_NAMES = {"f": "float", "i": "integer", "u": "unsigned integer", "b": "bool", "O": "Python object",
               "U": "str", "S": "bytes", "c": "complex", "V": "void", "M": "datetime", "m": "timedelta"}


def _describe_value(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, (str, bytes)):
        text = repr(value)
        return f"{type(value).__name__} {text if len(text) <= 24 else text[:21] + '...'}"
    return type(value).__name__


def _index_bound(fn: str, p: JSONObject) -> int | None:
    bound = p.get("index_bound")
    if bound is not None and (type(bound) is not int or bound < 0):
        raise KinaRuntimeError(f"the manifest gives parameter `{p.get('name')}` of `{fn}` the index_bound "
                               f"{bound!r}, not a non-negative integer; rebuild with `kinac build`")
    return bound


def _as_tuple(out: object) -> tuple[object, ...]:
    try:
        return tuple(out)  # type: ignore[arg-type]  # any iterable; anything else is the TypeError below
    except TypeError:
        raise KinaArgumentError(f"out= takes an array or a sequence of arrays, got {type(out).__name__}") from None


# ---- the library ----------------------------------------------------------------------
class Library:
    """A loaded Kina library: `lib.fn(...)`, `lib["fn"](...)`, `lib.functions`."""

    def __init__(self, so_path: str | Path, manifest: JSONObject, fastcall: bool = True) -> None:
        self.path = Path(so_path)
        self.manifest = manifest
        self._dll, self.threaded = open_library(self.path, manifest)
        self.functions: dict[str, KinaFunction] = {}
        last_error = last_error_function(self._dll, self.path)
        for entry in manifest["functions"]:
            packed = packed_symbol(entry["symbol"])
            if not all(hasattr(self._dll, s) for s in (entry["symbol"], packed)):
                raise KinaRuntimeError(f"{self.path} does not export {entry['symbol']} and {packed} "
                                       f"(function `{entry['name']}` of its manifest); rebuild it")
        check_abi(self._dll, manifest, self.path)   # the library, not the manifest, is the authority
        for entry in manifest["functions"]:
            self.functions[entry["name"]] = KinaFunction(getattr(self._dll, packed_symbol(entry["symbol"])),
                                                         entry, fastcall, self.threaded, last_error)
        # `lib.fn` as a plain attribute (no __getattr__ call per step of a loop), unless
        # the name is taken by the Library itself (then it is lib["fn"]).
        for name, fn in self.functions.items():
            if not name.startswith("_") and name not in self.__dict__ and not hasattr(type(self), name):
                self.__dict__[name] = fn

    def __getitem__(self, name: str) -> KinaFunction:
        if name not in self.functions:
            raise KeyError(self._missing(name))
        return self.functions[name]

    def __getattr__(self, name: str) -> KinaFunction:
        if name.startswith("_") or "functions" not in self.__dict__:
            raise AttributeError(name)
        if name not in self.functions:
            raise AttributeError(self._missing(name))
        return self.functions[name]

    def _missing(self, name: str) -> str:
        return (f"{self.path.name} has no function `{name}` "
                f"(it has: {', '.join(self.functions) or 'none'})")

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __repr__(self) -> str:
        return f"<Library {self.path.name}: {', '.join(self.functions)}>"


def load(so_path: str | Path, manifest: str | Path | JSONObject | None = None, *, fastcall: bool = True) -> Library:
    """Load a library built by `kinac build` and its manifest (default: <so>.json).
    fastcall=False calls every function through the Python checks and ctypes only."""
    so_path = Path(so_path)
    return Library(so_path, load_manifest(so_path, manifest), fastcall)
