"""One exported function of a Kina library as a Python callable (compiler/runtime/library.py
describes the two call paths; compiler/runtime/dynamic.py adds the functions with dynamic sizes)."""
from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from compiler.backend.entry_points import BAD_SIZES, BOUNDS_FAILED
from compiler.core.types import DType
from compiler.runtime import binding, dlpack
from compiler.runtime.arrays import Array, empty
from compiler.runtime.dlpack import FRESH_KINDS
from compiler.runtime.errors import KinaArgumentError, KinaIndexError
from compiler.runtime.loader import KinaRuntimeError
from compiler.runtime.prepared import Prepared, TensorSpec

try:  # the C fast path, built by `pip install -e .` (setup.py)
    from compiler.runtime import _fastcall
except ImportError:  # pragma: no cover - exercised by the tests with fastcall=False
    _fastcall = None  # type: ignore[assignment]  # (the slow path then runs every call)

if TYPE_CHECKING:
    from ctypes import _NamedFuncPointer  # what a CDLL attribute is (typeshed's name)

# A parsed JSON object: the manifest (compiler/build.py writes it) and its function entries.
JSONObject = dict[str, Any]


def numpy_dtype(kina_dtype: str) -> np.dtype[Any]:
    try:
        return DType.named(kina_dtype).np_dtype
    except ValueError:
        raise KinaRuntimeError(f"unknown Kina dtype {kina_dtype!r} in the manifest") from None
    except ImportError as e:   # pragma: no cover - ml_dtypes is a dependency
        raise KinaRuntimeError(f"{kina_dtype} arrays need ml_dtypes ({e}): pip install ml_dtypes") from None


def _describe_array(a: Array) -> str:
    return f"an array of dtype {a.dtype} and shape {list(a.shape)}"


# ---- one function -------------------------------------------------------------------
class KinaFunction:
    """A callable bound to one exported function; see the module docstring.

    f(*inputs) returns new result arrays (one array, or a tuple of several);
    f(*inputs, out=buffers) writes into `buffers` (an array or a sequence of arrays,
    C-contiguous, writeable, of the result types, overlapping no other output; an input
    they overlap is read from a copy) and returns them."""

    params: Sequence[TensorSpec | binding.Tensor]
    results: Sequence[TensorSpec | binding.Tensor]

    def __init__(self, packed: _NamedFuncPointer, entry: JSONObject, fastcall: bool = True,
                 threaded: bool = False, last_error: Callable[[], bytes | None] | None = None) -> None:
        self._setup(packed, entry, threaded, last_error)
        params = [TensorSpec(p["name"], p["dtype"], tuple(p["shape"]), numpy_dtype(p["dtype"]),
                             _index_bound(self.name, p)) for p in entry["params"]]
        results = [TensorSpec(f"result {i}", r["dtype"], tuple(r["shape"]), numpy_dtype(r["dtype"]))
                   for i, r in enumerate(entry["results"])]
        self.params, self.results = params, results
        self._prep = Prepared(params, results, packed, fastcall)
        # (the static call reads these as attributes of its own: one lookup less each)
        self._descriptors = self._prep.descriptors
        self._fresh_shapes = self._prep.fresh_shapes
        self._fresh_dtypes = self._prep.fresh_dtypes
        self._fast = self._prep.fast
        self.__doc__ = self.signature()

    def _setup(self, packed: _NamedFuncPointer, entry: JSONObject, threaded: bool,
               last_error: Callable[[], bytes | None] | None) -> None:
        self.name: str = entry["name"]
        self.symbol: str = entry["symbol"]
        self.threaded = threaded   # its library runs kernels on the OpenMP runtime's threads
        packed.argtypes, packed.restype = [ctypes.c_void_p], ctypes.c_int32   # entry_points: 0, or an error code
        self._packed = packed
        self._last_error = last_error

    @property
    def uses_fastcall(self) -> bool:
        return self._fast is not None

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        res = [r.describe() for r in self.results]
        ret = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
        return f"{self.name}({params}) -> {ret}"

    # -- a call: the C fast path, else the Python checks and a ctypes call -------------
    def __call__(self, *args: object, out: object = None, like: object = None) -> Any:
        """The results (see the class docstring); `like`: return them as that kind of tensor
        (a tensor, or "torch" / "jax" / "numpy": compiler/runtime/dlpack.py)."""
        outs: tuple[object, ...]
        if out is None:
            if like is not None and self._fast is not None:
                # torch results: allocated in C, made tensors through torch's DLPack C API
                kind = FRESH_KINDS[like if type(like) is str else type(like)]
                if kind is not None:
                    made = _fastcall.fresh(self._fast, args, kind)
                    if type(made) is not int:
                        return made
                    if made < -1:
                        raise self._library_error(self._prep, -1 - made)
                    # declined (the results freed): the Python path below says why
            outs = tuple(map(empty, self._fresh_shapes, self._fresh_dtypes))
        else:
            outs = out if type(out) is tuple else (out,) if isinstance(out, np.ndarray) else _as_tuple(out)
        given = outs
        # _fastcall.call: -1 after a call that returned 0, >= 0 when it declined (the Python
        # checks then say why), -1 - code after a call that returned an error code.
        declined = -1 if self._fast is None else _fastcall.call(self._fast, args + outs)
        if declined >= 0 or self._fast is None:
            args, outs, declined = self._foreign(self._prep, args, outs, declined)
        if self._fast is None or declined >= 0:
            status = self._call_checked(self._prep, args, outs, out is None)
        else:
            status = -1 - declined
        if status:
            raise self._library_error(self._prep, status)
        # every output is an array of its result's type now (checked by either path); out=
        # tensors of another library are returned as given
        results = cast(tuple[Array, ...], given)
        value = results[0] if len(results) == 1 else results
        return value if like is None else dlpack.wrap(value, like)

    def _foreign(self, p: Prepared, args: tuple[object, ...], outs: tuple[object, ...],
                 declined: int) -> tuple[tuple[object, ...], tuple[object, ...], int]:
        """A call the fast path declined: with the DLPack tensors among its arrays as NumPy
        arrays over their memory (compiler/runtime/dlpack.py), tried on the fast path again."""
        converted = dlpack.convert(self.name, p.params, args, outs)
        if converted is None:
            return args, outs, declined
        args, outs = converted
        return args, outs, (-1 if p.fast is None else _fastcall.call(p.fast, args + outs))

    def _call_checked(self, p: Prepared, args: tuple[object, ...], outs: tuple[object, ...],
                      fresh: bool = False) -> int:
        """Check (and convert) every array, then call through ctypes; returns the entry
        point's code.  `fresh`: the outputs were allocated by this call (nothing can alias them)."""
        if len(args) != len(p.params):
            raise KinaArgumentError(f"{self.name} takes {len(p.params)} argument(s) "
                                    f"({', '.join(s.name for s in p.params) or 'none'}), got {len(args)}")
        if len(outs) != len(p.results):
            raise KinaArgumentError(f"{self.name}: out= needs {len(p.results)} array(s), got {len(outs)}")
        arrays = [self._input(a, spec) for a, spec in zip(args, p.params)]
        arrays += [self._output(o, spec) for o, spec in zip(outs, p.results)]
        for i, spec in p.bounded:
            self._check_indices(arrays[i], spec)
        addresses = [a.ctypes.data for a in arrays]
        if not fresh:
            self._unalias(p, arrays, addresses)
        return self._call_ctypes(p, arrays, addresses)

    def _library_error(self, p: Prepared, status: int) -> Exception:
        """The exception for a code the entry point returned (compiler/backend/entry_points.py)."""
        if status == BOUNDS_FAILED:
            raw = self._last_error() if self._last_error is not None else None
            message = raw.decode(errors="replace") if raw else "an index out of bounds"
            return KinaIndexError(f"{self.name}: {message} (an index the runtime could not check before the call, "
                                  f"computed or constant inside the library, is outside the range of the tensor "
                                  f"it indexes; the outputs hold no result)")
        specs = p.specs
        if BAD_SIZES <= status < BAD_SIZES + len(specs):
            spec = specs[status - BAD_SIZES]
            what = "parameter" if status - BAD_SIZES < len(p.params) else "out="
            return KinaRuntimeError(f"{self.name}: the library was not compiled for {what} `{spec.name}` as "
                                    f"{spec.describe()} (the manifest's shape); the library is the authority: "
                                    f"rebuild with `kinac build` and keep the .so and its .json together")
        return KinaRuntimeError(f"{self.name}: the library returned the unknown error code {status}")

    def _call_ctypes(self, p: Prepared, arrays: list[Array], addresses: list[int]) -> int:
        """Fill a private copy of the descriptors with the arrays' data pointers and
        call the packed entry point; `arrays` keeps the arrays alive until it returns."""
        d = p.descriptors
        block = (ctypes.c_int64 * (len(d.template) // 8)).from_buffer_copy(d.template)
        base = ctypes.addressof(block)
        packed = (ctypes.c_void_p * (len(arrays) + len(d.extra)))()
        for i, (address, word) in enumerate(zip(addresses, d.words)):
            block[word] = block[word + 1] = address     # allocated, aligned
            packed[i] = base + 8 * word
        for j, word in enumerate(d.extra):              # a dynamic function's sizes block
            packed[len(arrays) + j] = base + 8 * word
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

    def _unalias(self, p: Prepared, arrays: list[Array], addresses: list[int]) -> None:
        """Outputs overlapping each other are refused (both results cannot be kept); an input
        an output overlaps is replaced by a copy, since the library may write that output
        before it has read all of the input (`layer(h, w, out=h)` then works as written).
        Every array is C-contiguous here, so [address, address + nbytes) is exactly its
        memory: one sweep over the spans sorted by start finds every overlap."""
        n_in = len(p.params)
        spans = sorted([(addr, addr + size, k) for addr, (size, k) in zip(addresses, p.slots) if size])
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
    if hasattr(type(out), "__dlpack__"):   # one tensor of another library (iterable, but one buffer)
        return (out,)
    try:
        return tuple(out)  # type: ignore[arg-type]  # any iterable; anything else is the TypeError below
    except TypeError:
        raise KinaArgumentError(f"out= takes an array or a sequence of arrays, got {type(out).__name__}") from None
