"""Validate: the compiled library against the NumPy interpreter and finite differences.

`kinac validate FILE` (and `validate_file`, used by the language server):

1. builds FILE into a temporary library, adding for every `handle g(..) with
   reverseMode` in the program an exported wrapper `__validate_grad_g` whose
   body is just that handle, so the compiled cotangents can be called directly
   (compiler/oracle/gradients.py);
2. runs every exported function (those with parameters on
   `interp.random_inputs`, and `main`) in ONE child process (compiler/oracle/child.py:
   a crash of compiled code is reported on its function and a new child runs the rest);
   a dynamic export runs at several sizes (compiler/oracle/dynamic_sizes.py);
3. while the child runs, compares each output with `interp.run_function` (max abs / rel
   error, tolerances per dtype: compiler/oracle/tolerance.py), and checks each gradient
   wrapper's cotangents against central differences of the primal in float64: by
   default along a few random directions per parameter (compiler/oracle/directional.py),
   with `exhaustive=True` (`--exhaustive`) element by element (gradients.py), skipping
   what sits at a kink (compiler/oracle/kinks.py; the report counts it).

Another check of a function's results plugs into `_Run._compare`, which has the task
(its reference program and function), the inputs, the library's results and the references,
and appends OutputChecks to the function's report.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compiler import build, build_cli
from compiler.core.diagnostics import display_path
from compiler.core.progress import Ticker
from compiler.core.types import DType
from compiler.ir import nodes as ir
from compiler.oracle import directional, dynamic_sizes, gradients
from compiler.oracle.child import RUN_MARK, child_command, child_main, flat, load_outputs, run_in_child, write_inputs
from compiler.oracle.dynamic_sizes import Task
from compiler.oracle.gradients import (
    FD_STEPS,
    FD_TOLERANCES,
    GRAD_PREFIX,
    add_gradient_wrappers,
    finite_differences,
    handles_in,
)
from compiler.oracle.tolerance import OutputCheck, check_output, describe_worst
from compiler.runtime.arrays import Array
from compiler.runtime.loader import KinaRuntimeError

# Names other oracles (differential, dynamic_fuzz), the language server and the tests use from here.
__all__ = ["FD_TOLERANCES", "GRAD_PREFIX", "RUN_MARK", "FunctionReport", "References", "ValidationReport",
           "add_gradient_wrappers", "check_results", "finite_differences", "handles_in", "load_outputs",
           "references", "run_in_child", "validate_file", "write_inputs"]
_flat = flat
_child_command = child_command


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
    # seconds per phase: build, inputs, references (interpreter), gradients, child (its
    # wall time beyond the comparisons done meanwhile), total
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (self.build is not None and self.build.ok and not self.cancelled
                and all(f.ok for f in self.functions))

    @property
    def failing(self) -> list[str]:
        """Names of the Kina functions that failed (gradient wrappers map to the handled function)."""
        return [f.name for f in self.functions if not f.ok]


def _result_dtypes(fn: ir.Function) -> list[str]:
    return [t.dtype.value for t in build.result_types(fn)]


# ---- driver -----------------------------------------------------------------------------
Progress = Callable[[str, int, int], None]


def validate_file(path: str | Path, *, seed: int = 0, opt_level: int | None = None,
                  progress: Progress | None = None,
                  cancel: Callable[[], bool] | None = None, timeout: float = 120.0,
                  only: Collection[str] | None = None, sizes: Mapping[str, int] | None = None,
                  exhaustive: bool = False, vjp: Collection[str] = ()) -> ValidationReport:
    """Build, run in a child process, compare.  progress(what, done, total) is called with
    ("building", 0, 0) before the build and (function, done, total) as functions finish;
    cancel() returning True stops the run (report.cancelled).  `only`: run just these
    exported functions (a gradient wrapper is GRAD_PREFIX + the handled function's name);
    the whole file is still built.  `sizes`: `--size` values for the generic functions to
    export; the others are exported dynamic and checked at several sizes each
    (compiler/oracle/dynamic_sizes.py).  `exhaustive`: check gradients element by element
    (gradients.py) instead of along random directions (directional.py).  `vjp`: functions f
    whose VJP export f_vjp is built too and checked along random directions (vjp_check.py)."""
    report = ValidationReport(str(path))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kina-validate-") as tmp:
        work = Path(tmp)
        if progress is not None:
            progress("building", 0, 0)
        report.build = build.build_file(path, work / "lib.so", opt_level, transform=add_gradient_wrappers,
                                        sizes=sizes, vjp=list(vjp))
        report.timings["build"] = time.perf_counter() - start
        if not report.build.ok:
            return report
        if cancel is not None and cancel():     # cancelled during the build: run nothing
            report.cancelled = True
            return report
        program, so_path = report.build.program, report.build.so_path
        assert program is not None and so_path is not None     # a build that is ok has both
        run = _Run(work, _tasks(path, program, only, seed, vjp), report.timings, seed, exhaustive, progress,
                   set(vjp))
        runnable = run.write_inputs()
        child_start = time.perf_counter()
        finished = run_in_child(so_path, work, runnable, timeout=timeout, cancel=cancel, on_done=run.on_done,
                                idle=run.prepare_next)
        report.timings["child"] = time.perf_counter() - child_start - run.comparing
        report.cancelled = not finished
        report.functions = [run.reports[t.key] for t in run.tasks]
    report.timings["total"] = time.perf_counter() - start
    return report


def _tasks(path: str | Path, program: ir.Program, only: Collection[str] | None, seed: int,
           vjp: Collection[str] = ()) -> list[Task]:
    fns = [f for f in build.exported(program) if f.params or f.name == "main" or (only and f.name in only)]
    if only is not None:
        fns = [f for f in fns if f.name in only]
    tasks = [Task(f.name, f, program, {}) for f in fns if not f.sizes]
    return tasks + dynamic_sizes.tasks(path, program, [f for f in fns if f.sizes], seed, vjp)


class _Run:
    """The tasks of one validation: their inputs (written for the child before it starts),
    their references (made while the child starts and runs: prepare_next) and, as the child
    finishes each, the comparisons."""

    def __init__(self, work: Path, tasks: list[Task], timings: dict[str, float], seed: int,
                 exhaustive: bool, progress: Progress | None, vjp: set[str] | None = None) -> None:
        self.work, self.tasks, self.timings, self.seed = work, tasks, timings, seed
        self.exhaustive, self.progress, self.vjp = exhaustive, progress, vjp or set()
        self.by_key = {t.key: t for t in tasks}
        self.reports = {t.key: FunctionReport(t.label) for t in tasks}
        self.inputs: dict[str, list[Array]] = {}
        self.refs: dict[str, References | None] = {}    # made while the child runs
        self.done, self.total, self.comparing = 0, 0, 0.0
        for phase in ("inputs", "references", "gradients"):
            timings.setdefault(phase, 0.0)

    def write_inputs(self) -> list[str]:
        """Make and write every task's inputs; the keys of those the child is to run."""
        from compiler.oracle import interp
        start = time.perf_counter()
        for task in self.tasks:
            try:
                args = interp.random_inputs(task.fn, self.seed, task.program) if task.fn.params else []
            except Exception as e:  # an interpreter failure is reported, not raised
                self.reports[task.key].error = f"could not make inputs: {type(e).__name__}: {e}"
                continue
            self.inputs[task.key] = args
            write_inputs(self.work, task.key, args, task.sizes)
        self.total = len(self.inputs)
        self.timings["inputs"] += time.perf_counter() - start
        return list(self.inputs)

    def prepare_next(self) -> bool:
        """While the child starts and runs: the next task's references (False: all made)."""
        key = next((k for k in self.inputs if k not in self.refs), None)
        if key is None:
            return False
        start = time.perf_counter()
        self.refs[key] = self._references(self.by_key[key], self.reports[key])
        self.comparing += time.perf_counter() - start
        return True

    def on_done(self, key: str, error: str | None) -> None:
        start = time.perf_counter()
        rep, task = self.reports[key], self.by_key[key]
        want = self.refs[key] if key in self.refs else self._references(task, rep)
        if want is None:          # the reference trapped: so must the library
            rep.error = (f"library {error}; {rep.error}" if error is not None else
                         f"library returned although the {rep.error}")
        elif not want:            # the interpreter failed: rep.error says how
            pass
        elif error is not None:
            rep.error = error
        else:
            self._compare(rep, task, want)
        self.done += 1
        self.comparing += time.perf_counter() - start
        if self.progress is not None:
            self.progress(rep.name, self.done, self.total)

    def _references(self, task: Task, rep: FunctionReport) -> References | None:
        """The task's references; None when the interpreter rejects its inputs (rep.error
        says why); an empty tuple, with rep.error set, when the interpreter failed."""
        start = time.perf_counter()
        try:
            return references(task.program, task.fn.name, self.inputs[task.key])
        except KinaRuntimeError as e:
            # The reference rejects these inputs (e.g. an index out of range): the library
            # must then stop at its own bounds check, which the child run reports.
            rep.error = f"reference interpreter: {e}"
            return None
        except Exception as e:
            rep.error = f"interpreter failed: {type(e).__name__}: {e}"
            return ()
        finally:
            self.timings["references"] += time.perf_counter() - start

    def _compare(self, rep: FunctionReport, task: Task, want: References) -> None:
        got = load_outputs(self.work, task.key)
        check_results(rep, task.fn, got, want)
        _check_vjp(rep, task, self.vjp, self.inputs[task.key], got, self.seed)
        if not task.fn.name.startswith(GRAD_PREFIX):
            return
        start = time.perf_counter()
        try:
            if self.exhaustive:
                compare_gradients(rep, task.program, task.fn, self.inputs[task.key], got, want)
            else:
                rep.checks += directional_checks(task.program, task.fn, self.inputs[task.key], want, self.seed)
        except Exception as e:
            rep.error = f"finite differences failed: {type(e).__name__}: {e}"
        finally:
            self.timings["gradients"] += time.perf_counter() - start


def _target(wrapper: ir.Function) -> str:
    call = wrapper.result
    assert isinstance(call, ir.Handle), wrapper.name       # add_gradient_wrappers makes a handle
    return call.fn


def _magnitude(want: References) -> float:
    """The primal's (the wrapper's result 0) size, summed: the scale of float64 cancellation
    in its differences.  Not the references' rounding magnitudes: those are measured at the
    declared dtype's rounding, which flips near-ties a float64 step never reaches."""
    return float(np.nansum(np.abs(np.asarray(want[0][0], np.float64))))


def directional_checks(program: ir.Program, wrapper: ir.Function, args: list[Array], want: References,
                       seed: int = 0) -> list[OutputCheck]:
    """The default gradient check: the float64 reverse-mode cotangents (the wrapper's
    float64 reference after its primal result) along random directions (directional.py)."""
    return directional.check_gradients(program, _target(wrapper), args, want[0][1:], _magnitude(want), seed)


def compare_gradients(fn_report: FunctionReport, program: ir.Program, wrapper: ir.Function,
                      args: list[Array], got: list[Array], want: References | None = None) -> None:
    """`--exhaustive`: the library's cotangents (got[1:]) element by element against finite
    differences, and (given want) the float64 reverse mode on the same coordinates."""
    grads64 = None if want is None else want[0][1:]
    magnitude = 0.0 if want is None else _magnitude(want)
    fn_report.checks += gradients.exhaustive_checks(program, _target(wrapper), args, got[1:], grads64, magnitude)


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


def _check_vjp(rep: FunctionReport, task: Task, vjp: set[str], args: list[Array], got: list[Array],
               seed: int) -> None:
    """A VJP export (`--vjp f`): its cotangents along random directions (vjp_check.py)."""
    from compiler.oracle import vjp_check
    target = vjp_check.target_of(task.program, task.fn, vjp) if vjp else None
    if target is None:
        return
    try:
        rep.checks.append(vjp_check.check_vjp(task.program, target, args, got, FD_STEPS, FD_TOLERANCES, seed))
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
                         + _skipped_note(c))
    if report.cancelled:
        lines.append("cancelled")
    n_bad = len(report.failing)
    lines.append(f"{len(report.functions) - n_bad}/{len(report.functions)} functions passed")
    return "\n".join(lines)


def _skipped_note(c: OutputCheck) -> str:
    n, what = c.skipped, "direction" if c.reference == directional.REFERENCE else "coordinate"
    return "" if not n else f"  ({n} {what}{'s' if n > 1 else ''} at a kink skipped)"


def add_validate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .kina source file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before the child is killed")
    parser.add_argument("--exhaustive", action="store_true",
                        help="check every cotangent element (up to 128 per parameter) by finite differences, "
                             "not the default random directions")
    parser.add_argument("--timings", action="store_true", help="print the seconds of each phase on stderr")
    build_cli.add_size_args(parser)
    build_cli.add_vjp_args(parser)
    build_cli.add_opt_args(parser)


def cli_validate(args: argparse.Namespace) -> int:
    sizes = build_cli.sizes_of(args)
    if sizes:
        print(f"sizes: {', '.join(f'{k}={v}' for k, v in sizes.items())}")
    what = f"kinac validate: {display_path(args.file)}:"
    with Ticker(sys.stderr, f"{what} building") as ticker:   # on a terminal, after 2 s
        def progress(function: str, done: int, total: int) -> None:
            ticker.update(f"{what} {function}" if not total else f"{what} validated {done}/{total}")
        report = validate_file(args.file, seed=args.seed, opt_level=getattr(args, "opt_level", None),
                               timeout=args.timeout, sizes=sizes, exhaustive=args.exhaustive, progress=progress,
                               vjp=getattr(args, "vjp", None) or [])
    if args.timings:
        print("validate timings: " + ", ".join(f"{k} {v:.2f} s" for k, v in report.timings.items()), file=sys.stderr)
    if report.build is not None:
        build.print_diagnostics(report.build)
    if report.build is None or not report.build.ok:
        print(f"kinac validate: {display_path(args.file)}: build failed", file=sys.stderr)
        return 1
    print(format_report(report))
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":     # the former entry of the child (compiler/oracle/child.py)
        so_path, work, *names = argv[1:]
        return child_main(so_path, work, names)
    parser = argparse.ArgumentParser(prog="python -m compiler.oracle.validate")
    add_validate_args(parser)
    return cli_validate(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
