"""Build driver: `.kina` file -> host shared library + manifest + C header.

    parse -> check -> lower_handles -> emit_mlir -> [build cache] -> toolchain (mlir-opt, mlir-translate, llc, cc)

Next to `NAME.so` it writes `NAME.json` (the manifest the Python runtime reads:
the SHA-256 of the library's bytes, and per function its parameters, their
index bounds, and its results) and `NAME.h` (for C callers).  No output may
be the source file or another output of the same build, and an existing file
there must be Kina's own (compiler/outputs.py: `check_outputs`, `check_ours`).

Every top-level Kina function `f` is exported as
`_mlir_ciface_kina_f(inputs..., outputs...)`: pointers to memref
descriptors, inputs in parameter order, then one caller-owned output per
result.  The `kina_` prefix plus `-Wl,-Bsymbolic` keep a Kina function named
like a libc function (`step`) from clashing.  Generated functions (`f.rev`)
are private and inlined.

The toolchain stage is skipped when compiler/backend/cache.py holds a library built from the
same emitted MLIR with the same options, compiler and toolchain (KINA_CACHE=0 or
`--no-cache` builds anyway).

Diagnostics of every stage are collected and printed like `kinac check`; a
stage that reports errors stops the build before the next one runs.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from compiler.backend import cache as build_cache
from compiler.backend import errors as toolchain_errors
from compiler.backend import toolchain
from compiler.backend import worker as backend_worker
from compiler.backend.pipelines import PIPELINES
from compiler.core.diagnostics import Diagnostic, SourceText, Span, UsageError, display_path, read_source
from compiler.ir import nodes as ir
from compiler.ir.verify import verify as verify_ir
from compiler.outputs import (
    MANIFEST_FORMAT,
    SYMBOL_PREFIX,
    Manifest,
    artifact_paths,
    check_ours,
    check_outputs,
    exported,
    header_for,
    manifest_for,
    result_types,
    sha256_text,
    write_artifacts,
)

# the manifest and header writers live in compiler/outputs.py; callers reach them through build too
__all__ = ["MANIFEST_FORMAT", "SYMBOL_PREFIX", "BuildResult", "Manifest", "build_file", "build_source",
           "exported", "header_for", "manifest_for", "result_types", "write_artifacts"]

T = TypeVar("T")


@dataclass
class BuildResult:
    ok: bool
    so_path: Path | None = None
    manifest_path: Path | None = None
    header_path: Path | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    source: SourceText | None = None
    program: ir.Program | None = None      # checked program, before lower_handles
    lowered: ir.Program | None = None      # after lower_handles (what was emitted)
    mlir: str | None = None
    manifest: Manifest | None = None
    cached: bool = False                   # the library came from the build cache
    sizes: dict[str, int] = field(default_factory=dict)   # `--size` values the generic exports are bound to
    # the diagnostics of imported modules with errors, each with its source (printed after the file's own)
    imported: list[tuple[SourceText, list[Diagnostic]]] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)   # (path, text) of every file built from


# ---- the front half: text -> checked program -> MLIR ------------------------------------
def _errors(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diags)


def _timed(timings: dict[str, float], stage: str, fn: Callable[..., T], *args: Any) -> T:
    t0 = time.perf_counter()
    out = fn(*args)
    timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0
    return out


def front_end(text: str, path: str, timings: dict[str, float], result: BuildResult,
              transform: Callable[[ir.Program], ir.Program] | None = None,
              sizes: Mapping[str, int] | None = None, vjp: Sequence[str] = ()) -> str | None:
    """parse -> check -> instantiate -> (transform) -> (VJP exports) -> lower_handles -> emit.
    Fills result.diagnostics / result.program; returns the MLIR text, or None when a stage
    reported errors.  `sizes` (`--size B=4`) binds the sizes of generic functions to export;
    `vjp` (`--vjp f`) adds the export `f_vjp` (compiler/ad/vjp_export.py) for each name."""
    from compiler import ad as autodiff
    from compiler import analysis
    from compiler.backend.emit import program as emit_mlir  # lazy: `kinac --help` stays fast
    source = result.source
    # The same front end as `kinac check` and the language server, so a build
    # reports exactly their diagnostics (parse, types, reverseMode restrictions).
    snap = _timed(timings, "parse+check", analysis.analyze, text, path)
    result.diagnostics += snap.diagnostics
    result.files = [(m.path, m.text) for m in snap.closure()]
    if _errors(snap.diagnostics):
        result.imported = snap.imported_errors()
        return None
    program, diags = _timed(timings, "parse+check", snap.program_for, dict(sizes or {}))
    result.diagnostics += diags
    if _errors(diags):
        return None
    result.sizes = dict(sizes or {})
    if transform is not None:
        program = transform(program)
    if vjp:
        program, diags = _timed(timings, "autodiff", autodiff.add_vjp_exports, program, vjp)
        result.diagnostics += diags
        if _errors(diags):
            return None
    result.program = program
    lowered, diags = _timed(timings, "autodiff", autodiff.lower_handles, program)
    # The AD pass builds IR no user wrote: it must obey the rules user code obeys.
    diags = diags or _timed(timings, "autodiff", verify_ir, lowered, "reverseMode")
    result.diagnostics += diags
    if _errors(diags):
        return None
    emitted = _timed(timings, "emit", emit_mlir.emit_program, lowered, source)
    mlir, diags = (emitted, []) if isinstance(emitted, str) else (emitted.text, list(emitted.diagnostics))
    result.diagnostics += diags
    if _errors(diags) or not mlir:
        return None
    result.mlir, result.lowered = mlir, lowered
    return mlir


# ---- build ---------------------------------------------------------------------------
def default_output(path: Path) -> Path:
    return path.with_suffix(".so")


def default_opt_level() -> int:
    """The optimisation level used when none is given: $KINA_OPT_LEVEL, else 0.
    (CI runs the whole suite once more with KINA_OPT_LEVEL=2.)"""
    value = os.environ.get("KINA_OPT_LEVEL", "0")
    if value not in ("0", "1", "2", "3"):
        raise UsageError(f"KINA_OPT_LEVEL must be 0, 1, 2 or 3, not {value!r}")
    return int(value)


def build_source(text: str, path: str, out_so: str | Path, *, opt_level: int | None = None,
                 timings: dict[str, float] | None = None,
                 transform: Callable[[ir.Program], ir.Program] | None = None,
                 cache: bool | None = None, sizes: Mapping[str, int] | None = None,
                 vjp: Sequence[str] = ()) -> BuildResult:
    """Build Kina source text into `out_so` (+ manifest and header next to it).

    `transform` may rewrite the checked program before handles are lowered (the
    validator adds gradient wrappers this way).  `cache`: use the build cache
    (default: unless KINA_CACHE=0).  `sizes`: `--size` values (generic exports).
    `vjp`: functions f to export `f_vjp` of too (`--vjp f`)."""
    timings = {} if timings is None else timings
    opt_level = default_opt_level() if opt_level is None else opt_level
    outputs = artifact_paths(Path(out_so))
    check_outputs(Path(path), outputs)
    check_ours(outputs)
    hint = _source_hint(text + _sizes_text(sizes) + _imports_text(path, text)
                        + "".join(f"\n// --vjp {n}" for n in vjp), opt_level, transform, cache)
    worker = _worker_ahead(opt_level, hint)
    try:
        return _build(text, path, Path(out_so), opt_level, timings, transform, cache, worker, hint, sizes,
                      tuple(vjp))
    finally:
        if worker is not None:
            worker.close()


def keep_exports(names: Iterable[str]) -> Callable[[ir.Program], ir.Program]:
    """A `transform` for build_source/build_file that builds only the functions `names`
    (and what they call): e.g. the two functions a benchmark calls from a generic file whose
    `--size` values bind (and so export) many more."""
    wanted = tuple(sorted(set(names)))

    def keep(program: ir.Program) -> ir.Program:
        return ir.reachable(program, wanted)
    keep.__qualname__ = f"keep_exports({','.join(wanted)})"   # the build cache tells the variants apart
    return keep


def checked_exports(names: list[str]) -> Callable[[ir.Program], ir.Program]:
    """keep_exports for `--export`: a name the program does not export is a usage error."""
    keep = keep_exports(names)

    def check(program: ir.Program) -> ir.Program:
        missing = [n for n in names if n not in program.functions or not ir.is_export(n)]
        if missing:
            have = ", ".join(f.name for f in exported(program)) or "none"
            raise UsageError(f"--export {missing[0]}: no such exported function (the build exports: {have})")
        return keep(program)
    check.__qualname__ = keep.__qualname__
    return check


def _imports_text(path: str, text: str) -> str:
    """The files the source imports, directly or not, with their digests: part of the build
    cache's source hint, so that an edit of an imported file is no hinted hit.  (The cache key
    itself is the emitted MLIR's, which holds every function of every file the program uses.)"""
    from compiler.modules.workspace import import_closure  # lazy, like the front end
    return "".join(f"\n// import {p} {sha256_text(t)}" for p, t in import_closure(path, text)[1:])


def _sizes_text(sizes: Mapping[str, int] | None) -> str:
    return "".join(f"\n// --size {k}={v}" for k, v in sorted((sizes or {}).items()))


def _source_hint(text: str, opt_level: int, transform: Callable[[ir.Program], ir.Program] | None,
                 cache: bool | None) -> str | None:
    """The build cache's source hint of this build (None when the cache is off)."""
    if not build_cache.enabled(cache):
        return None
    variant = "" if transform is None else f"{transform.__module__}.{transform.__qualname__}"
    try:
        return build_cache.source_hint(text, opt_level, variant)
    except OSError:
        return None


# Set by keep_backend_warm: this process builds again, so its -O2 builds of a large module
# run in parts side by side too (compiler/backend/split.py says why).
_rebuilding = False


def builds_again() -> None:
    """Mark this process as one that builds again (the language server, from its first Build &
    validate): its -O2 builds of a large module run in parts from then on, so the first edit
    finds the LLVM objects of the parts it left alone (compiler/backend/llvm_stage.py)."""
    global _rebuilding
    _rebuilding = True


def keep_backend_warm(opt_level: int) -> None:
    """For a process that builds again (the language server, after each Build & validate):
    start the next -O1..-O3 build's worker now, so that its load of the MLIR bindings
    (0.2-0.3 s, more than a warm process's whole front end) is over when that build starts.
    The worker waits, idle, until a build takes it (`_worker_ahead`); `release_backend`
    ends it when the process stops building.  From now on the process's -O2 builds of a
    large module run in parts, as -O0's do (`builds_again`)."""
    builds_again()
    if _runs_a_worker(opt_level):
        backend_worker.prestart()


def _runs_a_worker(opt_level: int) -> bool:
    """Whether a build at this level runs the in-process back end, in a worker (and the MLIR
    bindings it needs are installed)."""
    pipeline = PIPELINES.get(opt_level)
    return pipeline is not None and pipeline.backend == "engine" and importlib.util.find_spec("mlir") is not None


def release_backend() -> None:
    """End the worker keep_backend_warm started, if no build took it."""
    backend_worker.drop_spare()


def _worker_ahead(opt_level: int, hint: str | None = None) -> backend_worker.Worker | None:
    """For the in-process back end, its worker process, started now: it loads the MLIR
    bindings while this process runs the front end (the scaled StoryLM: 0.25 s of a
    3 s build).  Not started when the build cache's hint says this source will hit;
    unused on a front-end error or a cache hit, then closed."""
    if not _runs_a_worker(opt_level):
        return None
    if hint is not None and build_cache.hinted_hit(hint):
        return None
    return backend_worker.take_spare() or backend_worker.Worker()


def _build(text: str, path: str, out_so: Path, opt_level: int, timings: dict[str, float],
           transform: Callable[[ir.Program], ir.Program] | None, cache: bool | None,
           worker: backend_worker.Worker | None, hint: str | None = None,
           sizes: Mapping[str, int] | None = None, vjp: Sequence[str] = ()) -> BuildResult:
    result = BuildResult(False, source=SourceText(text, str(path)), timings=timings)
    mlir = front_end(text, str(path), timings, result, transform, sizes, vjp)
    if mlir is None:
        return result
    _check_writable(out_so)
    key = _timed(timings, "cache", _cache_key, mlir, opt_level, cache)
    result.cached = key is not None and _timed(timings, "cache", build_cache.fetch, key, out_so)
    if not result.cached:
        try:
            compiled = toolchain.compile_mlir(mlir, out_so, opt_level=opt_level, source=result.source,
                                              timings=timings, program=result.lowered, worker=worker,
                                              objects=None if key is None else build_cache.cache_root(),
                                              rebuilding=_rebuilding)
        except toolchain_errors.ToolchainError as e:
            result.diagnostics.append(Diagnostic("toolchain", str(e), Span(0, 0)))
            return result
        result.diagnostics += compiled.diagnostics
        if not compiled.ok:
            return result
        if key is not None:
            _timed(timings, "cache", build_cache.store, key, out_so,
                   {"source": Path(path).name, "opt_level": opt_level})
    if key is not None and hint is not None:
        build_cache.remember(hint, key)
    assert result.program is not None   # front_end returned MLIR: it set the program
    t0 = time.perf_counter()
    result.manifest_path, result.header_path, result.manifest = write_artifacts(
        result.program, out_so, str(path), result.sizes, result.files)
    timings["manifest"] = time.perf_counter() - t0
    result.so_path, result.ok = out_so, True
    return result


def _cache_key(mlir: str, opt_level: int, use: bool | None) -> str | None:
    """The build-cache key of this build, or None when the cache is off or unusable."""
    if not build_cache.enabled(use):
        return None
    try:
        return build_cache.key_for(mlir, opt_level, toolchain.build_settings())
    except (OSError, toolchain_errors.ToolchainError):   # no tools: the build reports it itself
        return None


def _check_writable(out_so: Path) -> None:
    """An output the user cannot write is a usage error, reported before compiling."""
    try:
        out_so.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write {display_path(out_so)}: {e.strerror or e}") from None
    if not os.access(out_so.parent, os.W_OK):
        raise UsageError(f"cannot write {display_path(out_so)}: {display_path(out_so.parent)} is not writable")


def build_file(path: str | Path, out_so: str | Path | None = None, opt_level: int | None = None,
               timings: dict[str, float] | None = None,
               transform: Callable[[ir.Program], ir.Program] | None = None,
               cache: bool | None = None, sizes: Mapping[str, int] | None = None,
               vjp: Sequence[str] = ()) -> BuildResult:
    """`kinac build`: FILE.kina -> FILE.so (or out_so) + .json manifest + .h header."""
    path = Path(path)
    out_so = Path(out_so) if out_so else default_output(path)
    text = read_source(path)   # UsageError when unreadable
    return build_source(text, str(path), out_so, opt_level=opt_level,
                        timings=timings, transform=transform, cache=cache, sizes=sizes, vjp=vjp)


# ---- CLI hooks (compiler/cli.py calls these) --------------------------------------------
def print_diagnostics(result: BuildResult, stream: TextIO = sys.stderr) -> None:
    source = result.source or SourceText("", "<input>")
    for d in result.diagnostics:
        print(source.render(d), file=stream)
    for module, diags in result.imported:
        for d in diags:
            print(module.render(d), file=stream)
