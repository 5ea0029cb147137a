"""Stage 5, runtime: load a compiled Kina library and call its functions with NumPy arrays.

Takes a `.so` with its manifest (`.json`, written by `kinac build`); gives a Library whose
functions take and return NumPy arrays, every argument checked (dtype, shape, index
range, contiguity) with a KinaArgumentError / KinaIndexError that names the parameter,
never a crash of the calling process.

    from compiler import runtime
    lib = runtime.load("model.so")          # reads model.json next to it
    logits = lib.storylm0_forward(ids, emb, ...)

Public entry points (other packages import only these):
  load(so_path, manifest=None) -> Library; Library, KinaFunction, DynamicKinaFunction (sizes
    bound from the arguments' shapes at each call: lib.f(x, ..., H=2) for a size no shape gives)
  KinaArgumentError, KinaIndexError, KinaRuntimeError
  numpy_dtype, manifest_path, load_manifest, load_npz, save_npz
  FASTCALL_AVAILABLE  whether the C fast call path (_fastcall) is built
  empty(shape, dtype)  a 64-byte aligned array (fresh results are; allocate out= buffers with it)
  arrays    Array (one tensor's ndarray), load_npz / save_npz that round-trip every dtype
  loader    KinaRuntimeError, MANIFEST_FORMAT, the manifest and the library's private copy

Inside: library (the Library), function / dynamic (a static / dynamic-size function and
its call paths), binding (a dynamic call's sizes), prepared (descriptors, a prepared call),
errors, _fastcall (the C fast path, setup.py).
"""
from compiler.runtime.arrays import empty
from compiler.runtime.library import (
    FASTCALL_AVAILABLE,
    DynamicKinaFunction,
    KinaArgumentError,
    KinaFunction,
    KinaIndexError,
    KinaRuntimeError,
    Library,
    load,
    load_manifest,
    load_npz,
    manifest_path,
    numpy_dtype,
    save_npz,
)

__all__ = ["FASTCALL_AVAILABLE", "DynamicKinaFunction", "KinaArgumentError", "KinaFunction", "KinaIndexError",
           "KinaRuntimeError", "Library", "arrays", "empty", "load", "load_manifest", "load_npz", "loader", "manifest_path", "numpy_dtype", "save_npz"]
