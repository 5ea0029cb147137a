"""Runtime: call the functions of a compiled Kina library with NumPy arrays.

    lib = runtime.load("model.so")          # reads model.json next to it
    logits = lib.storylm0_forward(ids, emb, ...)
    loss, g_emb = lib["step"](ids, emb, out=(loss_buf, g_buf))

Every exported function `_mlir_ciface_kina_<name>(in descriptors..., out
descriptors...)` (see build.py) takes one memref descriptor
`{T* allocated; T* aligned; int64 offset; int64 sizes[R]; int64 strides[R]}`
per input, then one per result, all owned by the caller.  The toolchain also
exports `_kina_packed_kina_<name>(void **descriptors)` (compiler/pipelines.py),
which takes the same pointers from one array; the runtime calls that one.

Everything that depends only on the signature is prepared once per function: the
descriptors with their offsets, sizes and strides (the data pointers are the only
words written per call) and the packed entry point.  A call then goes one of two
ways, both checking every array on every call:

- fast: the C helper compiler._fastcall checks each array through the buffer
  protocol (dtype, shape, C-contiguity, alignment, writeable outputs), writes
  its data pointer into a per-call copy of the descriptors and calls the entry
  point; on the first array that does not match it calls nothing and returns;
- checked: the Python checks below, which convert what may be converted (lists,
  non-contiguous views are copied) and raise KinaArgumentError naming the
  parameter otherwise, then a ctypes call.  Used when the fast path declines a
  call, for BF16/F8 functions (ml_dtypes arrays export no buffer format) and
  when the extension is not built.

The runtime keeps no reference to any array after a call and shares no mutable
state between calls, so calls from several threads are safe.  Library functions
call no malloc for their results, so repeated calls do not grow memory.
"""
from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:  # low-precision NumPy dtypes; only needed for BF16/F8 functions
    import ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    ml_dtypes = None

try:  # the C fast path, built by `pip install -e .` (setup.py)
    from compiler import _fastcall
except ImportError:  # pragma: no cover - exercised by the tests with fastcall=False
    _fastcall = None

FASTCALL_AVAILABLE = _fastcall is not None


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
    "Bool": lambda: np.dtype(np.bool_),
}

# The dtypes whose arrays have a standard buffer format ('f', 'e', 'q'/'l'), the
# only ones compiler._fastcall checks.
FASTCALL_DTYPES = frozenset({"F32", "F16", "I64"})


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


@dataclass(frozen=True)
class Descriptors:
    """The descriptors of one call, {allocated, aligned, offset, sizes[R], strides[R]}
    per tensor, as consecutive int64 words: `template` has every word but the data
    pointers filled in; `words[i]` is the index of tensor i's first word (`allocated`,
    then `aligned`).  Each call fills its own copy, so concurrent calls share nothing."""
    template: bytes
    words: tuple[int, ...]

    @staticmethod
    def of(specs: list[TensorSpec]) -> "Descriptors":
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
    C-contiguous, writeable, of the result types) and returns them."""

    def __init__(self, packed, entry: dict, fastcall: bool = True):
        self.name: str = entry["name"]
        self.symbol: str = entry["symbol"]
        self.params = [TensorSpec(p["name"], p["dtype"], tuple(p["shape"]), numpy_dtype(p["dtype"]))
                       for p in entry["params"]]
        self.results = [TensorSpec(f"result {i}", r["dtype"], tuple(r["shape"]), numpy_dtype(r["dtype"]))
                        for i, r in enumerate(entry["results"])]
        self._descriptors = Descriptors.of(self.params + self.results)
        self._fresh_shapes = [r.shape for r in self.results]
        self._fresh_dtypes = [r.np_dtype for r in self.results]
        packed.argtypes, packed.restype = [ctypes.c_void_p], None
        self._packed = packed
        self._fast = self._fast_entry(packed) if fastcall else None
        self.__doc__ = self.signature()

    def _fast_entry(self, packed):
        """The compiler._fastcall.Entry of this function, or None where the fast path
        does not apply (extension not built, a dtype without a buffer format)."""
        specs = self.params + self.results
        if _fastcall is None or any(s.dtype not in FASTCALL_DTYPES for s in specs):
            return None
        slots = tuple((s.dtype, i >= len(self.params), s.shape, word)
                      for i, (s, word) in enumerate(zip(specs, self._descriptors.words)))
        address = ctypes.cast(packed, ctypes.c_void_p).value
        return _fastcall.Entry(address, self._descriptors.template, slots, np.ndarray)

    @property
    def uses_fastcall(self) -> bool:
        return self._fast is not None

    def signature(self) -> str:
        params = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        res = [r.describe() for r in self.results]
        ret = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
        return f"{self.name}({params}) -> {ret}"

    # -- a call: the C fast path, else the Python checks and a ctypes call -------------
    def __call__(self, *args, out=None):
        if out is None:
            outs = tuple(map(np.empty, self._fresh_shapes, self._fresh_dtypes))
        else:
            outs = out if type(out) is tuple else (out,) if isinstance(out, np.ndarray) else _as_tuple(out)
        if self._fast is None or _fastcall.call(self._fast, args + outs) >= 0:
            self._call_checked(args, outs)
        return outs[0] if len(outs) == 1 else outs

    def _call_checked(self, args: tuple, outs: tuple) -> None:
        """Check (and convert) every array, then call through ctypes."""
        if len(args) != len(self.params):
            raise KinaArgumentError(f"{self.name} takes {len(self.params)} argument(s) "
                                    f"({', '.join(p.name for p in self.params) or 'none'}), got {len(args)}")
        if len(outs) != len(self.results):
            raise KinaArgumentError(f"{self.name}: out= needs {len(self.results)} array(s), got {len(outs)}")
        bound = ([self._input(a, spec) for a, spec in zip(args, self.params)]
                 + [self._output(o, spec) for o, spec in zip(outs, self.results)])
        self._call_ctypes(bound)

    def _call_ctypes(self, arrays: list[np.ndarray]) -> None:
        """Fill a private copy of the descriptors with the arrays' data pointers and
        call the packed entry point; `arrays` keeps the arrays alive until it returns."""
        block = (ctypes.c_int64 * (len(self._descriptors.template) // 8)).from_buffer_copy(
            self._descriptors.template)
        base = ctypes.addressof(block)
        packed = (ctypes.c_void_p * len(arrays))()
        for i, (a, word) in enumerate(zip(arrays, self._descriptors.words)):
            block[word] = block[word + 1] = a.ctypes.data     # allocated, aligned
            packed[i] = base + 8 * word
        self._packed(packed)

    # -- the Python checks: the same as the C helper's, with precise errors ---------------
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
        """An input as given, or a C-contiguous aligned copy (lists, strided views)."""
        arr = self._coerce(arr, spec, "parameter")
        if not (arr.flags.c_contiguous and arr.flags.aligned):
            arr = np.require(arr, requirements="CA")
        return arr

    def _output(self, o, r: TensorSpec) -> np.ndarray:
        if not isinstance(o, np.ndarray):
            raise KinaArgumentError(f"{self.name}: out= {r.name} must be a NumPy array, got {type(o).__name__}")
        self._coerce(o, r, "out=")
        if not (o.flags.c_contiguous and o.flags.writeable and o.flags.aligned):
            raise KinaArgumentError(f"{self.name}: out= {r.name} must be a writeable, aligned, "
                                    f"C-contiguous array")
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

    def __init__(self, so_path: str | Path, manifest: dict, fastcall: bool = True):
        self.path = Path(so_path)
        self.manifest = manifest
        try:
            self._dll = ctypes.CDLL(str(self.path.resolve()))
        except OSError as e:
            raise KinaRuntimeError(f"cannot load {self.path}: {e}") from None
        self.functions: dict[str, KinaFunction] = {}
        for entry in manifest["functions"]:
            packed = _packed_symbol(entry["symbol"])
            if not all(hasattr(self._dll, s) for s in (entry["symbol"], packed)):
                raise KinaRuntimeError(f"{self.path} does not export {entry['symbol']} and {packed} "
                                       f"(function `{entry['name']}` of its manifest); rebuild it")
            self.functions[entry["name"]] = KinaFunction(getattr(self._dll, packed), entry, fastcall)
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


def _packed_symbol(symbol: str) -> str:
    """The packed entry point the toolchain adds next to `_mlir_ciface_kina_f`
    (compiler/pipelines.py: `_kina_packed_kina_f(void **descriptors)`)."""
    prefix = "_mlir_ciface_"
    return "_kina_packed_" + symbol[len(prefix):] if symbol.startswith(prefix) else symbol + "_packed"


def load(so_path: str | Path, manifest: str | Path | dict | None = None, *, fastcall: bool = True) -> Library:
    """Load a library built by `kinac build` and its manifest (default: <so>.json).
    fastcall=False calls every function through the Python checks and ctypes only."""
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
    return Library(so_path, manifest, fastcall)
