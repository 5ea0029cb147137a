"""Loading a compiled Kina library: its manifest, the check that they belong together,
and a private copy of its code for this process (compiler/runtime/library.py uses these).

- The manifest (`NAME.json`, written by `kinac build`) records `library_sha256`,
  the SHA-256 of the library's bytes.  `open_library` reads the library once,
  refuses it when the digest differs (a stale manifest, or a library rebuilt or
  replaced without it: calling it with the wrong descriptors would overrun
  buffers), and dlopens exactly the bytes it hashed.
- Those bytes are written to a fresh file that is dlopened and unlinked at once:
  the dynamic loader caches a library by path (and by inode), so loading a
  library rebuilt at the same path would otherwise hand back the old code.
  Every `runtime.load` therefore runs the code that is in the file at that
  moment; each load keeps its own mapping until the process exits.
- The digest only ties the manifest to the library it was written with; a manifest edited
  by hand ("I just changed the size") still names those bytes.  So `check_abi` compares
  the manifest with the library's own description of its functions (`_kina_abi()`,
  compiler/backend/entry_points.py: the dtype and shape of every parameter and result, in
  order) and refuses any difference by function and parameter; each call's entry point
  also compares the descriptors' sizes with its compiled shapes.
- A dynamic function (format 3) lists its size parameters (`"sizes": ["B", "T"]`) and
  writes shapes as size expressions (`["B", "T + 1"]`, as `str(compiler.core.sizes.Size)`
  spells them); its ABI line carries the same: `kina_f[B,T](i64[B,T + 1]) -> (f32[1,1])`.
  Both sides are compared after reading every dimension back with `parse_size`.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compiler.backend import threads
from compiler.backend.entry_points import ABI_SYMBOL, CIFACE_PREFIX, LAST_ERROR_SYMBOL
from compiler.core.sizes import Size, parse_size
from compiler.core.types import DType

MANIFEST_FORMAT = 3      # 2: library_sha256 and per-parameter index_bound; 3: dynamic sizes
# A library that calls the OpenMP runtime runs multithreaded kernels (compiler/backend/threads.py).
THREAD_POOL_SYMBOL = threads.FORK_SYMBOL


class KinaRuntimeError(Exception):
    """A library or manifest that cannot be loaded, or a call that cannot be made."""


def manifest_path(so_path: str | Path) -> Path:
    return Path(so_path).with_suffix(".json")


def load_manifest(so_path: Path, manifest: str | Path | dict[str, Any] | None) -> dict[str, Any]:
    """The manifest dict: given, or read from `manifest` / <so>.json."""
    if not so_path.exists():
        raise KinaRuntimeError(f"no such library: {so_path}")
    if not isinstance(manifest, dict):
        mpath = Path(manifest) if manifest else manifest_path(so_path)
        try:
            manifest = json.loads(mpath.read_text())
        except FileNotFoundError:
            raise KinaRuntimeError(f"{so_path} has no manifest {mpath}; build it with `kinac build`") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise KinaRuntimeError(f"manifest {mpath} is not valid JSON: {e}") from None
    if not isinstance(manifest, dict) or "functions" not in manifest:
        raise KinaRuntimeError(f"manifest of {so_path} has no 'functions' list")
    if manifest.get("format") != MANIFEST_FORMAT or "library_sha256" not in manifest:
        raise KinaRuntimeError(f"the manifest of {so_path} has format {manifest.get('format')!r}, not "
                               f"{MANIFEST_FORMAT} (written by another kinac); rebuild it with `kinac build`")
    return manifest


def open_library(path: Path, manifest: dict[str, Any]) -> tuple[ctypes.CDLL, bool]:
    """(the loaded private copy, whether it runs multithreaded kernels), after checking
    that the manifest was written for these bytes."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise KinaRuntimeError(f"cannot read {path}: {e.strerror or e}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest["library_sha256"]:
        raise KinaRuntimeError(f"the manifest does not describe {path}: it was written for a library "
                               f"with SHA-256 {str(manifest['library_sha256'])[:16]}..., this one is "
                               f"{digest[:16]}... (rebuilt or replaced without its manifest); rebuild "
                               f"with `kinac build` and keep {path.name} and its .json together")
    threaded = THREAD_POOL_SYMBOL in data
    if threaded:
        threads.prepare_process()
    return _dlopen_copy(path, data), threaded


def _dlopen_copy(path: Path, data: bytes) -> ctypes.CDLL:
    """dlopen `data` from a fresh file: in the temp directory, or next to the library
    when that one cannot map code (a noexec /tmp).  The file is unlinked once loaded."""
    errors = []
    for directory in (None, path.parent):
        try:
            fd, copy = tempfile.mkstemp(prefix=f".kina-{path.stem}-", suffix=".so", dir=directory)
        except OSError as e:
            errors.append(str(e))
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return ctypes.CDLL(copy)
        except OSError as e:
            errors.append(str(e).replace(copy, str(path)))
        finally:
            try:
                os.unlink(copy)
            except OSError:
                pass
    raise KinaRuntimeError(f"cannot load {path}: {errors[0]}")


# ---- the library's description of itself ----------------------------------------------------
_REBUILD = "rebuild with `kinac build` and keep the .so and its .json together"
_ABI_LINE = re.compile(r"([^\s\[(]+)(?:\[([^\]]*)\])?\((.*)\) -> \((.*)\)")
_KINA_DTYPE = {d.mlir: d.value for d in DType}


def last_error_function(dll: ctypes.CDLL, path: Path) -> Callable[[], bytes | None]:
    """The library's `_kina_last_error()`: the message of the bounds check that failed last
    on this thread (a library without it was built by an older kinac)."""
    try:
        fn = getattr(dll, LAST_ERROR_SYMBOL)
    except AttributeError:
        raise KinaRuntimeError(f"{path} has no {LAST_ERROR_SYMBOL} (built by an older kinac); {_REBUILD}") from None
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    return fn  # type: ignore[no-any-return]   # a ctypes function returning bytes | None


def library_abi(dll: ctypes.CDLL, path: Path) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """kina_f -> (size parameters, parameter types, result types) as the library was compiled:
    `f32[2,3]`, `i64[B,T + 1]`; no size parameters for a static function."""
    try:
        fn = getattr(dll, ABI_SYMBOL)
    except AttributeError:
        raise KinaRuntimeError(f"{path} does not describe its functions (no {ABI_SYMBOL}: built by an older "
                               f"kinac); {_REBUILD}") from None
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    out = {}
    for line in (fn() or b"").decode().splitlines():
        m = _ABI_LINE.fullmatch(line)
        if m:
            sizes = [s for s in (m[2] or "").split(",") if s]
            out[m[1]] = (sizes, [t for t in m[3].split(", ") if t], [t for t in m[4].split(", ") if t])
    return out


def _dim(d: object, sizes: list[str]) -> str:
    """One dimension as the ABI writes it: an int, or a size expression over `sizes` read back
    with parse_size and spelled as str(Size) spells it (ValueError / TypeError when malformed)."""
    if type(d) is int:
        return str(d)
    if not isinstance(d, str):
        raise TypeError(f"dimension {d!r} is neither an integer nor a size expression")
    value = parse_size(d)
    if not isinstance(value, Size):     # (the compiler writes a constant dimension as an int)
        raise TypeError(f"dimension {d!r} is a string, not an integer")
    unknown = sorted(value.names - set(sizes))
    if unknown:
        raise ValueError(f"dimension {d!r} uses {', '.join(unknown)}, not a size of the function "
                         f"({', '.join(sizes) or 'it has none'})")
    return str(value)


def _abi_type(t: dict[str, Any], sizes: list[str]) -> str:
    """A manifest tensor {dtype, shape} as the ABI writes it (KeyError / ValueError / TypeError when malformed)."""
    shape = t["shape"]
    if not isinstance(shape, list):
        raise TypeError(f"shape {shape!r} is not a list")
    return f"{DType.named(t['dtype']).mlir}[{','.join(_dim(d, sizes) for d in shape)}]"


def _canonical(abi: str, sizes: list[str]) -> str:
    """A compiled type `i64[B,T+1]` with its dimensions spelled as _dim spells them (as given when unreadable)."""
    elem, bracket, dims = abi.partition("[")
    if not bracket or not dims.endswith("]"):
        return abi
    try:
        return f"{elem}[{','.join(_dim(d, sizes) for d in dims[:-1].split(',') if d)}]"
    except (ValueError, TypeError):
        return abi


def manifest_sizes(entry: dict[str, Any]) -> list[str]:
    """The size parameters of a manifest function entry ([] for a static one)."""
    sizes = entry.get("sizes") or []
    if not isinstance(sizes, list) or not all(isinstance(s, str) and s.isidentifier() for s in sizes):
        raise KinaRuntimeError(f"the manifest gives `{entry.get('name')}` the sizes {sizes!r}, not a list of "
                               f"names; {_REBUILD}")
    return sizes


def _kina_type(abi: str) -> str:
    """`f32[2,3]` -> `Tensor[F32, [2, 3]]` (how messages show a type)."""
    elem, _, dims = abi.partition("[")
    return f"Tensor[{_KINA_DTYPE.get(elem, elem)}, [{', '.join(dims.rstrip(']').split(','))}]]"


def check_abi(dll: ctypes.CDLL, manifest: dict[str, Any], path: Path) -> None:
    """Refuse a manifest whose functions differ from what the library was compiled for:
    a dtype, a shape, the order or number of parameters, the number of results."""
    abi = library_abi(dll, path)
    for entry in manifest["functions"]:
        name = entry.get("name")
        symbol = str(entry.get("symbol", ""))[len(CIFACE_PREFIX):]
        if symbol not in abi:
            raise KinaRuntimeError(f"{path} has no function `{name}` ({symbol}) of its manifest; {_REBUILD}")
        compiled_sizes, params, results = abi[symbol]
        sizes = manifest_sizes(entry)
        if sizes != compiled_sizes:
            raise KinaRuntimeError(f"the manifest of {path.name} gives `{name}` the sizes "
                                   f"[{', '.join(sizes)}], but the library was compiled with "
                                   f"[{', '.join(compiled_sizes)}]; {_REBUILD}")
        _compare(path, name, "parameter", [p.get("name", f"#{i}") for i, p in enumerate(entry["params"])],
                 entry["params"], [_canonical(t, sizes) for t in params], sizes)
        _compare(path, name, "result", [f"{i}" for i in range(len(entry["results"]))], entry["results"],
                 [_canonical(t, sizes) for t in results], sizes)


def _compare(path: Path, fn: object, what: str, names: list[str], tensors: list[dict[str, Any]],
             compiled: list[str], sizes: list[str]) -> None:
    if len(tensors) != len(compiled):
        raise KinaRuntimeError(f"the manifest of {path.name} gives `{fn}` {len(tensors)} {what}(s), but the library "
                               f"was compiled with {len(compiled)}: ({', '.join(map(_kina_type, compiled))}); "
                               f"{_REBUILD}")
    for name, t, lib in zip(names, tensors, compiled):
        try:
            mine = _abi_type(t, sizes)
        except (KeyError, ValueError, TypeError) as e:
            raise KinaRuntimeError(f"the manifest of {path.name} describes {what} `{name}` of `{fn}` wrongly "
                                   f"({e}); {_REBUILD}") from None
        if mine != lib:
            raise KinaRuntimeError(f"the manifest of {path.name} says {what} `{name}` of `{fn}` is "
                                   f"{_kina_type(mine)}, but the library was compiled for {_kina_type(lib)}; "
                                   f"{_REBUILD}")
