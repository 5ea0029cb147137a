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
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from compiler.backend import threads

MANIFEST_FORMAT = 2      # 2: library_sha256 and per-parameter index_bound
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
