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

A function exported with dynamic sizes (a generic export built without `--size`; its
manifest entry lists "sizes", its shapes are size expressions) is a DynamicKinaFunction:
`lib.train_step(window, ..., H=2)` binds the sizes from the arrays' shapes (and keywords
for sizes no shape determines), prepares the concrete call at those shapes once, and then
calls exactly as above, the entry point taking the sizes block after the descriptors.

Modules: library (Library, load, the public names), function (KinaFunction: both call
paths and the Python checks), dynamic (DynamicKinaFunction and its cache of prepared
calls), binding (the sizes of a call and its errors), prepared (TensorSpec, Descriptors,
Prepared: a call prepared for one set of shapes), errors, loader, arrays, _fastcall.c.
"""
from __future__ import annotations

from pathlib import Path

from compiler.backend.entry_points import packed_symbol
from compiler.runtime.arrays import load_npz, save_npz
from compiler.runtime.dynamic import DynamicKinaFunction
from compiler.runtime.errors import KinaArgumentError, KinaIndexError
from compiler.runtime.function import JSONObject, KinaFunction, numpy_dtype
from compiler.runtime.loader import (
    KinaRuntimeError,
    check_abi,
    last_error_function,
    load_manifest,
    manifest_path,
    manifest_sizes,
    open_library,
)
from compiler.runtime.prepared import FASTCALL_AVAILABLE, FASTCALL_DTYPES, Descriptors, Prepared, TensorSpec

# The runtime's public API (what user code imports from compiler.runtime); the errors,
# the manifest helpers and load_npz / save_npz are defined in the modules that need them.
__all__ = ["load", "Library", "KinaFunction", "DynamicKinaFunction", "KinaArgumentError", "KinaIndexError",
           "KinaRuntimeError", "numpy_dtype", "manifest_path", "load_manifest", "load_npz", "save_npz",
           "FASTCALL_AVAILABLE", "FASTCALL_DTYPES", "Descriptors", "Prepared", "TensorSpec"]


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
            kind = DynamicKinaFunction if manifest_sizes(entry) else KinaFunction
            self.functions[entry["name"]] = kind(getattr(self._dll, packed_symbol(entry["symbol"])),
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
