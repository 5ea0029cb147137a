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

import argparse
import hashlib
import importlib.util
import json
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
from compiler.backend.entry_points import BAD_SIZES, BOUNDS_FAILED, LAST_ERROR_SYMBOL, OK, checked_symbol
from compiler.backend.pipelines import PIPELINES
from compiler.core.diagnostics import Diagnostic, SourceText, Span, UsageError, display_path, plain_name, read_source
from compiler.core.progress import Ticker
from compiler.core.sizes import Dim, Size, bindings, parse_binding
from compiler.core.types import DType, TensorType, TupleType
from compiler.ir import nodes as ir
from compiler.ir.uses import Uses
from compiler.ir.verify import verify as verify_ir
from compiler.outputs import EXPORT_MARK, HEADER_MARK, artifact_paths, check_ours, check_outputs

MANIFEST_FORMAT = 3       # compiler/runtime/loader.py reads this format (3: dynamic functions)
SYMBOL_PREFIX = EXPORT_MARK.decode()   # what outputs.check_ours recognises a library by
# The manifest (.json) of a library: its format is documented by manifest_for (JSON values).
Manifest = dict[str, Any]
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


# ---- manifest and header --------------------------------------------------------------
def exported(program: ir.Program) -> list[ir.Function]:
    """User functions (generated ones and instantiations of generic ones stay private)."""
    return [f for name, f in program.functions.items() if ir.is_export(name)]


def result_types(fn: ir.Function) -> list[TensorType]:
    t = fn.ret_type
    return [ir.as_tensor(x) for x in t.items] if isinstance(t, TupleType) else [ir.as_tensor(t)]


def _dim(d: Dim) -> int | str:
    """A dimension in the manifest: an int, or a size expression (`T + 1`, core.sizes.parse_size)."""
    return str(d) if isinstance(d, Size) else d


def _tensor(t: TensorType) -> dict[str, Any]:
    return {"dtype": t.dtype.value, "shape": [_dim(d) for d in t.shape]}


def _param(uses: Uses, fn: ir.Function, p: ir.Param) -> dict[str, Any]:
    """name, dtype, shape, and for an I64 parameter that feeds gather / take_along_axis
    (through layout ops, calls and handles) `index_bound`: every element must lie in
    [0, index_bound), which the runtime checks before each call."""
    bound = uses.index_bound(fn, p.name) if p.type.dtype is DType.I64 else None
    return {"name": p.name, **_tensor(p.type), **({} if bound is None else {"index_bound": _dim(bound)})}


def manifest_for(program: ir.Program, so_name: str, source_path: str | None = None,
                 library_sha256: str | None = None, sizes: Mapping[str, int] | None = None,
                 files: Iterable[tuple[str, str]] = ()) -> Manifest:
    """The manifest (format MANIFEST_FORMAT); `sizes`: the `--size` values the generic
    exports were bound to, recorded as "sizes" (omitted when none were given); `files`:
    (path, text) of every file the library was built from (the source and the modules it
    imports), recorded as "files" with their SHA-256 (omitted when none are given; a key
    the runtime does not read, so the format stays 3).  A dynamic
    function lists its size arguments as its "sizes" and writes size expressions in its
    shapes and index bounds (`"T + 1"`); docs/compiling.md, "Dynamic sizes"."""
    uses = Uses(program)
    functions = []
    for fn in exported(program):
        functions.append({
            "name": fn.name,
            "symbol": SYMBOL_PREFIX + fn.name,
            **({"sizes": list(fn.sizes)} if fn.sizes else {}),
            "params": [_param(uses, fn, p) for p in fn.params],
            "results": [_tensor(t) for t in result_types(fn)],
        })
    return {"format": MANIFEST_FORMAT, "library": so_name, "library_sha256": library_sha256,
            "source": source_path, **({"sizes": dict(sorted(sizes.items()))} if sizes else {}),
            **({"files": [{"path": p, "sha256": _sha256_text(t)} for p, t in files]} if files else {}),
            "abi": "each function takes its sizes (int64, a dynamic function only), then pointers to memref "
                   "descriptors: inputs, then caller-owned outputs; its checked entry returns 0, 1 (a failed "
                   "bounds check), 2 + i (descriptor i has other sizes) or 2 + n + j (size j is below 1)",
            "functions": functions}


# Storage type of each Kina dtype in C (low-precision floats are raw bits): types.DType.c_type.
C_TYPES = {d.value: d.c_type for d in DType}


def _struct_name(dtype: str, rank: int) -> str:
    return f"kina_memref_{dtype.lower()}_{rank}d"


# What every header says about the return codes (compiler/backend/entry_points.py).
_RETURN_CODES = f"""\
/* Each function returns KINA_OK, or
 *   KINA_INDEX_ERROR: an index computed inside it was out of range (_kina_last_error()
 *     says which check, on this thread); the outputs hold no result;
 *   KINA_BAD_SIZES + i: descriptor i (inputs, then outputs) has sizes other than the
 *     shapes the function was compiled for; nothing was called. */
#ifndef KINA_OK
#define KINA_OK {OK}
#define KINA_INDEX_ERROR {BOUNDS_FAILED}
#define KINA_BAD_SIZES {BAD_SIZES}
#endif"""


def header_for(manifest: Manifest, guard: str) -> str:
    """A C header: one descriptor struct per (dtype, rank) used, the return codes, one
    prototype of the checked entry point per function."""
    # plain_name: a `*/`, newline or non-UTF-8 byte of the source's name must not end the comment
    origin = plain_name(manifest["source"]) if manifest.get("source") else "a Kina program"
    bound = manifest.get("sizes")
    lines = [f"{HEADER_MARK} from {origin}. */",
             *([f"/* Generic functions bound to sizes {', '.join(f'{k}={v}' for k, v in bound.items())}. */"]
               if bound else []),
             f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>", "",
             "/* A memref descriptor: strides are in elements; buffers are owned by the caller. */"]
    structs: dict[tuple[str, int], None] = {}
    for fn in manifest["functions"]:
        for t in fn["params"] + fn["results"]:
            structs[(t["dtype"], len(t["shape"]))] = None
    for dtype, rank in structs:
        ct = C_TYPES[dtype]
        dims = f" int64_t sizes[{rank}]; int64_t strides[{rank}];" if rank else ""
        lines.append(f"typedef struct {{ {ct} *allocated; {ct} *aligned; int64_t offset;{dims} }} "
                     f"{_struct_name(dtype, rank)};")
    lines += ["", _RETURN_CODES, f"const char *{LAST_ERROR_SYMBOL}(void);", ""]
    for fn in manifest["functions"]:
        args = [f"int64_t {name}" for name in fn.get("sizes", [])]
        args += [f"{_struct_name(p['dtype'], len(p['shape']))} *{p['name']}" for p in fn["params"]]
        args += [f"{_struct_name(r['dtype'], len(r['shape']))} *out{i}" for i, r in enumerate(fn["results"])]
        def shape(t: Manifest) -> str:
            return "[" + ", ".join(map(str, t["shape"])) + "]"
        doc = ", ".join(f"{p['name']}: {p['dtype']}{shape(p)}" for p in fn["params"])
        res = ", ".join(f"{r['dtype']}{shape(r)}" for r in fn["results"])
        sizes = fn.get("sizes", [])
        lines.append(f"/* {fn['name']}{'[' + ', '.join(sizes) + ']' if sizes else ''}({doc}) -> ({res})"
                     + (f"\n * for any sizes {', '.join(sizes)} >= 1: each descriptor's sizes must be its "
                        "shape at those sizes (else KINA_BAD_SIZES + i; a size < 1 gives KINA_BAD_SIZES + "
                        "n + j, n the number of descriptors)" if sizes else "") + " */")
        lines.append(f"int32_t {checked_symbol(fn['symbol'])}({', '.join(args) or 'void'});")
    lines += ["", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def write_artifacts(program: ir.Program, so_path: Path, source_path: str | None = None,
                    sizes: Mapping[str, int] | None = None,
                    files: Iterable[tuple[str, str]] = ()) -> tuple[Path, Path, Manifest]:
    """The manifest and header of the library just linked at so_path (whose digest it records)."""
    sha = hashlib.sha256(so_path.read_bytes()).hexdigest()
    manifest = manifest_for(program, so_path.name, source_path, sha, sizes, files)
    mpath, hpath = so_path.with_suffix(".json"), so_path.with_suffix(".h")
    mpath.write_text(json.dumps(manifest, indent=2) + "\n")
    guard = "KINA_" + "".join(c if c.isalnum() else "_" for c in so_path.stem).upper() + "_H"
    hpath.write_text(header_for(manifest, guard))
    return mpath, hpath, manifest


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


def _checked_exports(names: list[str]) -> Callable[[ir.Program], ir.Program]:
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
    return "".join(f"\n// import {p} {_sha256_text(t)}" for p, t in import_closure(path, text)[1:])


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


def _worker_ahead(opt_level: int, hint: str | None = None) -> backend_worker.Worker | None:
    """For the in-process back end, its worker process, started now: it loads the MLIR
    bindings while this process runs the front end (the scaled StoryLM: 0.25 s of a
    3 s build).  Not started when the build cache's hint says this source will hit;
    unused on a front-end error or a cache hit, then closed."""
    pipeline = PIPELINES.get(opt_level)
    if pipeline is None or pipeline.backend != "engine" or importlib.util.find_spec("mlir") is None:
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
                                              timings=timings, program=result.lowered, worker=worker)
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
        return build_cache.key_for(mlir, opt_level)
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


def _opt(args: argparse.Namespace) -> int:
    level: int | None = getattr(args, "opt_level", None)
    return default_opt_level() if level is None else level


def _add_opt_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-O0", dest="opt_level", action="store_const", const=0, help="no optimisation (the default, unless $KINA_OPT_LEVEL says otherwise)")
    # -O1 and -O3 are -O2's MLIR pipeline with LLVM's `opt`/`llc` at that level
    for level, what in ((1, "-O2's pipeline, LLVM at -O1"), (2, "optimise"), (3, "-O2's pipeline, LLVM at -O3")):
        group.add_argument(f"-O{level}", dest="opt_level", action="store_const", const=level, help=what)
    parser.set_defaults(opt_level=None)


def add_build_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .kina source file")
    parser.add_argument("-o", "--output", help="the shared library to write (default: FILE.so)")
    parser.add_argument("--timings", action="store_true", help="print the time of each stage")
    parser.add_argument("--no-cache", action="store_true",
                        help="build even when the build cache holds this library (also: KINA_CACHE=0)")
    add_size_args(parser)
    parser.add_argument("--export", action="append", default=[], metavar="NAME",
                        help="export only this function (repeat; with what it calls): e.g. the step a "
                             "trainer calls, from a file whose --size values bind many generic functions")
    add_vjp_args(parser)
    _add_opt_args(parser)


def add_vjp_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vjp", action="append", default=[], metavar="NAME",
                        help="also export NAME_vjp(args.., g_y) -> (y, cotangents of the float args): the "
                             "vector-Jacobian product of NAME for an incoming cotangent g_y (repeat; docs/interop.md)")


def _size_arg(text: str) -> tuple[str, int]:
    try:
        return parse_binding(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_size_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", action="append", type=_size_arg, default=[], metavar="NAME=N",
                        help="bind a size of the generic functions to export (repeat: --size B=4 --size T=64)")


def sizes_of(args: argparse.Namespace) -> dict[str, int]:
    """The --size values; a size given twice with different values is a usage error."""
    try:
        return bindings(getattr(args, "size", None) or [])
    except ValueError as err:
        raise UsageError(str(err)) from None


def format_timings(timings: dict[str, float]) -> str:
    width = max((len(k) for k in timings), default=5)
    rows = [f"  {k:<{width}}  {v * 1000:8.1f} ms" for k, v in timings.items()]
    rows.append(f"  {'total':<{width}}  {sum(timings.values()) * 1000:8.1f} ms")
    return "\n".join(rows)


def cli_build(args: argparse.Namespace) -> int:
    timings: dict[str, float] = {}
    only = getattr(args, "export", None) or []
    with Ticker(sys.stderr, f"kinac build: building {display_path(args.file)}"):   # a terminal, after 2 s
        result = build_file(args.file, args.output, getattr(args, "opt_level", None), timings,
                            transform=_checked_exports(only) if only else None,
                            cache=False if getattr(args, "no_cache", False) else None, sizes=sizes_of(args),
                            vjp=getattr(args, "vjp", None) or [])
    print_diagnostics(result)
    if getattr(args, "timings", False):
        print(format_timings(timings))
    if not result.ok:
        print(f"kinac build: {display_path(args.file)}: build failed", file=sys.stderr)
        return 1
    assert result.manifest is not None and result.so_path and result.manifest_path and result.header_path   # set by a build that is ok
    fns = result.manifest["functions"]
    dynamic = [f["name"] for f in fns if f.get("sizes")]
    # a dynamic function's sizes are read at each call (docs/compiling.md, "Dynamic sizes")
    what = f"; {len(dynamic)} dynamic: any sizes" if dynamic else ""
    print(f"wrote {display_path(result.so_path)} ({len(fns)} functions{what}"
          f"{', from the build cache' if result.cached else ''}), "
          f"{display_path(result.manifest_path.name)}, {display_path(result.header_path.name)}")
    return 0


def add_emit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .kina source file")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--mlir", action="store_true", help="print the MLIR the compiler emits (default)")
    kind.add_argument("--llvm", action="store_true", help="print the LLVM IR after the pass pipeline")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")
    add_size_args(parser)
    _add_opt_args(parser)


def cli_emit(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if getattr(args, "output", None):
        check_outputs(path, {"output": Path(args.output)})
    text = read_source(path)
    result = BuildResult(False, source=SourceText(text, str(path)))
    mlir = front_end(text, str(path), {}, result, sizes=sizes_of(args))
    out = mlir
    if mlir is not None and getattr(args, "llvm", False):
        try:
            out, diags = toolchain.mlir_to_llvm_ir(mlir, opt_level=_opt(args),
                                                   source=result.source)
        except toolchain_errors.ToolchainError as e:
            out, diags = None, [Diagnostic("toolchain", str(e), Span(0, 0))]
        result.diagnostics += diags
    print_diagnostics(result)
    if out is None:
        return 1
    if getattr(args, "output", None):
        Path(args.output).write_text(out)
    else:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0
