"""Validate: the compiled library against the NumPy interpreter and finite differences.

`kinac validate FILE` (and `validate_file`, used by the language server):

1. builds FILE into a temporary library, adding for every `handle g(..) with
   reverseMode` in the program an exported wrapper `__validate_grad_g` whose
   body is just that handle, so the compiled cotangents can be called directly;
2. runs every exported function (those with parameters on
   `interp.random_inputs`, and `main`) in a CHILD process: a failed bounds check
   in the library is a KinaIndexError (compiler/backend/entry_points.py), but any
   crash of compiled code must not take the caller down.  A crash is reported as an
   error naming what the child printed and the child is restarted for the remaining
   functions;
3. compares each output with `interp.run_function` (max abs / rel error,
   tolerances per dtype), and for each gradient wrapper also compares the
   cotangents with central finite differences of the primal computed by the
   interpreter in float64, skipping the coordinates at a kink (compiler/oracle/kinks.py:
   where the step reaches a relu / maximum / clamp / comparison ... kink, or the declared
   dtypes' rounding may put the library on its other side; the report counts them).
"""
from __future__ import annotations

import argparse
import os
import pickle
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from compiler import build
from compiler.core.diagnostics import display_path, read_source
from compiler.core.sizes import Size
from compiler.core.types import FLOAT_DTYPES, DType, TupleType
from compiler.ir import nodes as ir
from compiler.oracle import dynamic_sizes
from compiler.oracle.tolerance import OutputCheck, check_output, compare, describe_worst
from compiler.runtime.arrays import Array
from compiler.runtime.loader import KinaRuntimeError

if TYPE_CHECKING:
    from compiler.oracle.interp import Value

GRAD_PREFIX = "__validate_grad_"
RUN_MARK = "@"   # `train_step@1`: run 1 of a dynamic function (its sizes are pickled with its inputs)

# Kina dtype -> (atol, rtol) for compiled vs interpreter, and for cotangents vs finite
# differences: types.DType.tolerance / fd_tolerance.
FD_TOLERANCES = {d.value: t for d in FLOAT_DTYPES if (t := d.fd_tolerance) is not None}   # every float dtype
FD_STEP = 1e-4            # central differences in float64
# A step that reaches a kink (compiler/oracle/kinks.py) is re-drawn smaller before the
# coordinate is skipped; 1e-6 still leaves float64 cancellation far below every bound.
FD_STEPS = (FD_STEP, FD_STEP / 10, FD_STEP / 100)
FD_MAX_ELEMENTS = 128     # per parameter: larger tensors are checked on a deterministic sample


@dataclass
class FunctionReport:
    name: str
    checks: list[OutputCheck] = field(default_factory=list)
    error: str | None = None     # crash / assertion / exception text

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)


@dataclass
class ValidationReport:
    path: str
    build: build.BuildResult | None = None
    functions: list[FunctionReport] = field(default_factory=list)
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return (self.build is not None and self.build.ok and not self.cancelled
                and all(f.ok for f in self.functions))

    @property
    def failing(self) -> list[str]:
        """Names of the Kina functions that failed (gradient wrappers map to the handled function)."""
        return [f.name for f in self.functions if not f.ok]


def _flat(value: Value) -> list[Array]:
    """A function's result as a list of arrays (a tensor, or a flat tuple of tensors)."""
    out: list[Array] = []
    for a in value if isinstance(value, tuple) else (value,):
        assert isinstance(a, np.ndarray), type(a)   # exported results are never nested tuples
        out.append(a)
    return out


def _result_dtypes(fn: ir.Function) -> list[str]:
    return [t.dtype.value for t in build.result_types(fn)]


# ---- gradient wrappers -----------------------------------------------------------------
def handles_in(fn: ir.Function) -> list[ir.Handle]:
    exprs = [b.value for b in fn.lets] + [fn.result]
    return [e for root in exprs for e in ir.walk(root) if isinstance(e, ir.Handle)]


def add_gradient_wrappers(program: ir.Program) -> ir.Program:
    """A copy of the program with `__validate_grad_g(params of g) = handle g(..) with reverseMode`
    for each differentiated function g.  The wrapper is exported, so its name must be one:
    for an instantiation of a generic function (`linear$4_3_5`, private) it is
    `__validate_grad_linear__4_3_5`, numbered on in the unlikely case a user function's
    wrapper already has that name."""
    out = ir.Program(dict(program.functions))
    wrapped: set[str] = set()
    for fn in list(program.functions.values()):
        for h in handles_in(fn):
            target = program.functions.get(h.fn)
            if target is None or h.fn in wrapped:
                continue
            wrapped.add(h.fn)
            name = _wrapper_name(h.fn, out.functions)
            if name is None:
                continue
            params = [ir.Param(p.name, p.type) for p in target.params]
            t, sizes = h.type, tuple(Size.var(n) for n in target.sizes)
            if sizes:   # a dynamic target: the wrapper is dynamic too, in the target's sizes
                floats = tuple(p.type for p in params if p.type.is_float)
                t = TupleType((target.ret_type, *floats)) if floats else target.ret_type
            call = ir.Handle(h.fn, [ir.Var(p.name, p.type) for p in params], h.handler, t, h.span, sizes)
            out.functions[name] = ir.Function(name, params, t, [], call, h.span, target.name_span, target.sizes)
    return out


def _wrapper_name(target: str, taken: Mapping[str, ir.Function]) -> str | None:
    name = GRAD_PREFIX + target.replace("$", "__")
    if "$" not in target:
        return None if name in taken else name
    candidates = (name if i == 0 else f"{name}__{i}" for i in range(len(taken) + 1))
    return next(c for c in candidates if c not in taken)


def finite_differences(program: ir.Program, target: str, args: list[Array]) -> tuple[list[Array | None], list[int]]:
    """d(sum of target's result)/d(each float parameter) by central differences in float64
    (None for I64 and Bool parameters), and per parameter how many coordinates were skipped
    at a kink (compiler/oracle/kinks.py).  Unsampled and skipped elements are NaN (not
    compared).  A coordinate whose step reaches a kink is re-drawn with the smaller steps
    of FD_STEPS; it is skipped when every step reaches one (an input on the kink) or when
    the declared dtypes' rounding may put the library on the kink's other side."""
    # lazy, like interp: the child process needs neither
    from compiler.oracle import kinks
    # every interpreter run lowers the handles of the program it is given: only target's callees
    program = ir.reachable(program, [target])
    fn = program.functions[target]
    x64 = [a.astype(np.float64) if p.type.is_float else a for a, p in zip(args, fn.params)]   # I64, Bool kept
    _, base = kinks.trace(program, target, x64, np.float64)
    margins = kinks.rounding_margins(program, target, args, base)
    grads: list[Array | None] = []
    skipped: list[int] = []
    rng = np.random.default_rng(0)
    for j, p in enumerate(fn.params):
        if not p.type.is_float:
            grads.append(None)
            skipped.append(0)
            continue
        g = np.full(p.type.shape, np.nan)
        flat_idx = np.arange(g.size)
        if g.size > FD_MAX_ELEMENTS:
            flat_idx = np.sort(rng.choice(g.size, FD_MAX_ELEMENTS, replace=False))
        n_skipped = 0
        for k in flat_idx:
            idx = tuple(int(i) for i in np.unravel_index(k, g.shape))
            value = _coordinate_difference(program, target, x64, j, idx, base, margins)
            if value is None:
                n_skipped += 1
            else:
                g[idx] = value
        grads.append(g)
        skipped.append(n_skipped)
    return grads, skipped


def _coordinate_difference(program: ir.Program, target: str, x64: list[Array], j: int, idx: tuple[int, ...],
                           base: list[Array], margins: list[Array]) -> float | None:
    """The central difference along one coordinate with the first step of FD_STEPS that
    reaches no kink; None when the coordinate is at one."""
    from compiler.oracle import kinks
    for step in FD_STEPS:
        totals, sites = [], []
        for sign in (1.0, -1.0):
            xs = list(x64)
            xs[j] = x64[j].copy()
            xs[j][idx] += sign * step
            value, seen = kinks.trace(program, target, xs, np.float64)
            totals.append(float(np.sum(np.asarray(value, dtype=np.float64))))
            sites.append(seen)
        verdict = kinks.classify(base, sites[0], sites[1], margins)
        if verdict == kinks.SMOOTH:
            return (totals[0] - totals[1]) / (2 * step)
        if verdict == kinks.ROUNDING:
            return None
    return None


def compare_gradients(fn_report: FunctionReport, program: ir.Program, wrapper: ir.Function,
                      args: list[Array], got: list[Array]) -> None:
    call = wrapper.result
    assert isinstance(call, ir.Handle), wrapper.name       # add_gradient_wrappers makes a handle
    target = call.fn
    fd, skipped = finite_differences(program, target, args)
    cotangents = got[1:]
    float_params = [(p, g, n) for p, g, n in zip(program.functions[target].params, fd, skipped) if g is not None]
    for (p, g_fd, n_skipped), g_comp in zip(float_params, cotangents):
        mask = ~np.isnan(g_fd)
        check = compare(f"d/d {p.name}", np.asarray(g_comp, np.float64)[mask], g_fd[mask],
                        p.type.dtype.value, "finite differences", FD_TOLERANCES)
        check.skipped = n_skipped
        fn_report.checks.append(check)


# ---- the child process ---------------------------------------------------------------------
def write_inputs(work: Path, key: str, args: list[Array], sizes: Mapping[str, int] | None = None) -> None:
    """The inputs (and a dynamic function's sizes, passed as keywords) of run `key` for
    child_main."""
    with open(work / f"{key}.in.pkl", "wb") as f:
        pickle.dump((args, dict(sizes or {})), f)


def child_main(so_path: str, work: str, names: list[str]) -> int:
    """Run functions of the library on pickled inputs; one START/DONE line per function."""
    from compiler import runtime
    proto = _route_c_stdout_to_stderr()
    lib = runtime.load(so_path)
    for name in names:
        print(f"START {name}", file=proto, flush=True)
        with open(Path(work) / f"{name}.in.pkl", "rb") as f:
            args, sizes = pickle.load(f)
        try:
            out = _flat(lib[name.partition(RUN_MARK)[0]](*args, **sizes))
        except Exception as e:   # the runtime refused the call (e.g. an index out of range)
            message = " ".join(f"{type(e).__name__}: {e}".split())
            print(f"RAISED {name} {message}", file=proto, flush=True)
            continue
        with open(Path(work) / f"{name}.out.pkl", "wb") as f:
            pickle.dump(out, f)
        print(f"DONE {name}", file=proto, flush=True)
    return 0


def _route_c_stdout_to_stderr() -> TextIO:
    """cf.assert prints its message with puts() and then aborts: on a pipe that message
    would sit in stdio's buffer and die with the process.  Keep the protocol on a private
    copy of fd 1, point fd 1 at stderr, and make C's stdout unbuffered."""
    import ctypes
    proto = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    libc = ctypes.CDLL(None)
    try:
        c_stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf(c_stdout, None, 2, 0)   # 2 = _IONBF
    except (ValueError, AttributeError):    # not glibc: the message may then be lost, the crash is not
        pass
    return proto


def _assertion(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    hits = [line for line in lines if "out of bounds" in line or "assert" in line.lower()]
    return (hits or lines or ["the library crashed without a message"])[0]


def _child_command(so_path: Path, work: Path, names: list[str]) -> tuple[list[str], dict[str, str], str]:
    """(argv, environment, working directory) of the child.  It must import this very `compiler` package and
    nothing from the caller's working directory or workspace (a `./compiler/` or `./numpy.py`
    there would run): `-P` (and PYTHONSAFEPATH for anything it starts) keeps the working
    directory off sys.path, the working directory is the private work dir, and the
    directory holding this package is put first on PYTHONPATH, made absolute."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONSAFEPATH="1",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-P", "-m", "compiler.oracle.validate", "--child", str(Path(so_path).resolve()),
           str(Path(work).resolve()), *names]
    return cmd, env, str(work)


def run_in_child(so_path: Path, work: Path, names: list[str], *, timeout: float,
                 cancel: Callable[[], bool] | None, on_done: Callable[[str, str | None], None]) -> bool:
    """Run `names` in child processes, restarting after a crash.  on_done(name, error|None)
    is called per function.  Returns False when cancelled."""
    pending = list(names)
    while pending:
        cmd, env, cwd = _child_command(so_path, work, pending)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        assert proc.stdout is not None and proc.stderr is not None     # both are pipes
        current, deadline, timed_out = None, time.monotonic() + timeout, False
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if cancel is not None and cancel():
                proc.kill()
                proc.wait()
                proc.stdout.close()
                proc.stderr.close()
                return False
            if time.monotonic() > deadline:
                timed_out = True
                proc.kill()
                break
            if not sel.select(0.1):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            kind, _, name = line.strip().partition(" ")
            if kind == "START":
                current = name
            elif kind == "DONE":
                pending.remove(name)
                on_done(name, None)
                current = None
            elif kind == "RAISED":
                name, _, message = name.partition(" ")
                pending.remove(name)
                on_done(name, f"call raised {message}")
                current = None
        sel.close()
        stderr = proc.stderr.read()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if current is None and pending:
            current = pending[0]          # died before starting (e.g. the library fails to load)
        if current is not None and current in pending:
            pending.remove(current)
            msg = (f"timed out after {timeout:.0f} s" if timed_out else
                   f"crashed (exit {proc.returncode}): {_assertion(stderr)}")
            on_done(current, msg)
    return True


# ---- driver -----------------------------------------------------------------------------
def validate_file(path: str | Path, *, seed: int = 0, opt_level: int | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  cancel: Callable[[], bool] | None = None, timeout: float = 120.0,
                  only: Collection[str] | None = None, sizes: Mapping[str, int] | None = None,
                  vjp: Collection[str] = ()) -> ValidationReport:
    """Build, run in a child process, compare.  progress(function, done, total) is called as
    functions finish; cancel() returning True stops the run (report.cancelled).  `only`:
    run just these exported functions (a gradient wrapper is GRAD_PREFIX + the handled
    function's name); the whole file is still built.  `sizes`: `--size` values for the
    generic functions to export; the others are exported dynamic and checked at several
    sizes each (compiler/oracle/dynamic_sizes.py).  `vjp`: functions f whose VJP export
    f_vjp is built too and checked along random directions (compiler/oracle/vjp_check.py)."""
    from compiler.oracle import interp
    report = ValidationReport(str(path))
    with tempfile.TemporaryDirectory(prefix="kina-validate-") as tmp:
        work = Path(tmp)
        report.build = build.build_file(path, work / "lib.so", opt_level, transform=add_gradient_wrappers,
                                        sizes=sizes, vjp=list(vjp))
        if not report.build.ok:
            return report
        if cancel is not None and cancel():     # cancelled during the build: run nothing
            report.cancelled = True
            return report
        program, so_path = report.build.program, report.build.so_path
        assert program is not None and so_path is not None     # a build that is ok has both
        fns = [f for f in build.exported(program) if f.params or f.name == "main" or (only and f.name in only)]
        if only is not None:
            fns = [f for f in fns if f.name in only]
        tasks = [_Task(f.name, f, program, {}) for f in fns if not f.sizes]
        tasks += _dynamic_tasks(path, program, [f for f in fns if f.sizes], seed)
        inputs: dict[str, list[Array]] = {}
        expected: dict[str, References | None] = {}
        reports: dict[str, FunctionReport] = {}
        for task in tasks:
            fn = task.fn
            reports[task.key] = FunctionReport(task.label)
            try:
                inputs[task.key] = interp.random_inputs(fn, seed, task.program) if fn.params else []
            except Exception as e:  # an interpreter failure is reported, not raised
                reports[task.key].error = f"could not make inputs: {type(e).__name__}: {e}"
                continue
            try:
                expected[task.key] = references(task.program, fn.name, inputs[task.key])
            except KinaRuntimeError as e:
                # The reference rejects these inputs (e.g. an index out of range): the library
                # must then stop at its own bounds check, which the child run reports.
                expected[task.key] = None
                reports[task.key].error = f"reference interpreter: {e}"
            except Exception as e:
                reports[task.key].error = f"interpreter failed: {type(e).__name__}: {e}"
                continue
            write_inputs(work, task.key, inputs[task.key], task.sizes)
        by_key = {t.key: t for t in tasks}
        runnable = [t.key for t in tasks if t.key in expected]
        done = [0]

        def on_done(name: str, error: str | None) -> None:
            rep, task = reports[name], by_key[name]
            want = expected[name]
            if want is None:      # the reference trapped: so must the library
                rep.error = (f"library {error}; {rep.error}" if error is not None else
                             f"library returned although the {rep.error}")
            elif error is not None:
                rep.error = error
            else:
                _compare_function(rep, task.program, task.fn, inputs[name], want, work, name)
                _check_vjp(rep, task, set(vjp), inputs[name], work, name, seed)
            done[0] += 1
            if progress is not None:
                progress(rep.name, done[0], len(runnable))

        finished = run_in_child(so_path, work, runnable, timeout=timeout, cancel=cancel,
                                on_done=on_done)
        report.cancelled = not finished
        report.functions = [reports[t.key] for t in tasks]
    return report


@dataclass
class _Task:
    """One function to run: `key` names its files and child run, `fn` and `program` are the
    reference's (a dynamic function's run: the static program at `sizes`)."""
    key: str
    fn: ir.Function
    program: ir.Program
    sizes: dict[str, int]
    label: str = ""

    def __post_init__(self) -> None:
        self.label = self.label or _display_name(self.fn)


def _dynamic_tasks(path: str | Path, program: ir.Program, fns: list[ir.Function], seed: int) -> list[_Task]:
    """The runs of the dynamic exports (compiler/oracle/dynamic_sizes.py)."""
    from compiler import analysis
    if not fns:
        return []
    snap = analysis.analyze(read_source(Path(path)), str(path))
    tasks = []
    for k, run in enumerate(dynamic_sizes.size_runs(fns, seed)):
        static, _ = snap.program_for(run, want_dynamic=False)
        ref = dynamic_sizes.reference_program(add_gradient_wrappers(static), program, [f.name for f in fns])
        for fn in fns:
            if fn.name in ref.functions:
                label = dynamic_sizes.label(fn, run)
                if fn.name.startswith(GRAD_PREFIX) and isinstance(fn.result, ir.Handle):
                    label = f"{fn.result.fn}{label[len(fn.name):]} (reverseMode)"
                tasks.append(_Task(f"{fn.name}{RUN_MARK}{k}", ref.functions[fn.name], ref,
                                   dynamic_sizes.sizes_of(fn, run), label))
    return tasks


def _display_name(fn: ir.Function) -> str:
    """A gradient wrapper shows as the function it differentiates (`linear$4_3_5` for an
    instantiation of a generic one)."""
    if fn.name.startswith(GRAD_PREFIX) and isinstance(fn.result, ir.Handle):
        return f"{fn.result.fn} (reverseMode)"
    return fn.name


# A function's reference results: the interpreter in float64, in the declared dtypes, and
# (optionally) the magnitude each float64 element was computed from (the rule above).
References = tuple[list[Array], ...]
JITTER_SEEDS = (1, 2)


def references(program: ir.Program, name: str, args: list[Array]) -> References:
    """The interpreter's results in float64 (the reference), in the declared dtypes, and
    the magnitudes of the float64 results (the rule above)."""
    from compiler.oracle import interp
    ref64 = _flat(interp.run_function(program, name, args, dtype=np.float64))
    same = _flat(interp.run_function(program, name, args))
    change = [np.zeros(np.shape(r)) for r in ref64]
    for seed in JITTER_SEEDS:
        try:
            jittered = _flat(interp.run_function(program, name, args, dtype=np.float64, jitter=seed))
        except KinaRuntimeError:     # an index computed from jittered floats left its range: no widening
            continue
        with np.errstate(invalid="ignore"):
            change = [np.fmax(c, np.abs(np.asarray(j, np.float64) - np.asarray(r, np.float64)))
                      for c, j, r in zip(change, jittered, ref64)]
    units = [interp.unit_roundoff(DType.named(d)) if DType.named(d).is_float else 1.0
             for d in _result_dtypes(program.functions[name])]
    return ref64, same, [c / u for c, u in zip(change, units)]


def check_results(rep: FunctionReport, fn: ir.Function, got: list[Array], want: References) -> None:
    """Append one check per result of fn (the rule above) to rep."""
    ref64, same, *rest = want
    magnitudes = rest[0] if rest else [None] * len(ref64)
    for i, (g, w, w_dt, m, dt) in enumerate(zip(got, ref64, same, magnitudes, _result_dtypes(fn))):
        rep.checks.append(check_output(f"result {i}", g, w, dt, w_dt, m))


def load_outputs(work: Path, key: str) -> list[Array]:
    """The results the child process computed for run `key` (child_main's pickle)."""
    with open(work / f"{key}.out.pkl", "rb") as f:
        out: list[Array] = pickle.load(f)
    return out


def _compare_function(rep: FunctionReport, program: ir.Program, fn: ir.Function,
                      args: list[Array], want: References, work: Path, key: str) -> None:
    got = load_outputs(work, key)
    check_results(rep, fn, got, want)
    if fn.name.startswith(GRAD_PREFIX):
        try:
            compare_gradients(rep, program, fn, args, got)
        except Exception as e:
            rep.error = f"finite differences failed: {type(e).__name__}: {e}"


def _check_vjp(rep: FunctionReport, task: _Task, vjp: set[str], args: list[Array], work: Path, key: str,
               seed: int) -> None:
    """A VJP export (`--vjp f`): its cotangents along random directions (vjp_check.py)."""
    from compiler.oracle import vjp_check
    target = vjp_check.target_of(task.program, task.fn, vjp) if vjp else None
    if target is None:
        return
    try:
        rep.checks.append(vjp_check.check_vjp(task.program, target, args, load_outputs(work, key), FD_STEPS,
                                              FD_TOLERANCES, seed))
    except Exception as e:
        rep.error = f"directional finite differences failed: {type(e).__name__}: {e}"


# ---- CLI ---------------------------------------------------------------------------------
def format_report(report: ValidationReport) -> str:
    lines = []
    for f in report.functions:
        if f.error:
            lines.append(f"FAIL {f.name}: {f.error}")
            continue
        lines.append(f"{'PASS' if f.ok else 'FAIL'} {f.name}")
        for c in f.checks:
            lines.append(f"  {'ok  ' if c.ok else 'BAD '} {c.name:<14} vs {c.reference:<18} {describe_worst(c)}"
                         + _skipped_note(c.skipped))
    if report.cancelled:
        lines.append("cancelled")
    n_bad = len(report.failing)
    lines.append(f"{len(report.functions) - n_bad}/{len(report.functions)} functions passed")
    return "\n".join(lines)


def _skipped_note(n: int) -> str:
    return "" if not n else f"  ({n} coordinate{'s' if n > 1 else ''} at a kink skipped)"


def add_validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .kina source file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before the child is killed")
    build.add_size_args(parser)
    build.add_vjp_args(parser)
    build._add_opt_args(parser)


def cli_validate(args: argparse.Namespace) -> int:
    sizes = build.sizes_of(args)
    if sizes:
        print(f"sizes: {', '.join(f'{k}={v}' for k, v in sizes.items())}")
    report = validate_file(args.file, seed=args.seed, opt_level=getattr(args, "opt_level", None),
                           timeout=args.timeout, sizes=sizes, vjp=getattr(args, "vjp", None) or [])
    if report.build is not None:
        build.print_diagnostics(report.build)
    if report.build is None or not report.build.ok:
        print(f"kinac validate: {display_path(args.file)}: build failed", file=sys.stderr)
        return 1
    print(format_report(report))
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        so_path, work, *names = argv[1:]
        return child_main(so_path, work, names)
    parser = argparse.ArgumentParser(prog="python -m compiler.oracle.validate")
    add_validate_args(parser)
    return cli_validate(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
