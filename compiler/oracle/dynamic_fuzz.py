"""Differential testing of dynamic exports (issue 25) on generated programs: each batch of
generated programs with size-generic helpers (compiler/oracle/progen/generic.py) is built
ONCE per -O level without `--size`, so every generic helper is a dynamic export
(check/instances.dynamic_exports: one compiled function for every size), and each dynamic
export is then called at three size assignments (all ones and two random ones, drawn per
program: compiler/oracle/dynamic_sizes.size_runs) with every size passed as a keyword, and
compared with

- the interpreter on the static program at those sizes (`program_for(run,
  want_dynamic=False)`), by the rule of `kinac validate` and the differential oracle
  (tolerance.check_output, float64 reference and magnitudes: validate.references);
- the statically bound build at those sizes (one `kinac build --size ..` per assignment
  and level, binding every size), whose results must meet the same rule against the
  dynamic library's (tolerance.compare with the interpreter's magnitudes) and the
  interpreter's too.

Each program's sizes get their own names (`A_c17`: rename_sizes), so one static build per
assignment binds every program of the batch at its own sizes.  Failures are
differential.Failure values of the kinds in KINDS; the builds, the child runs and the
bisection of a failing build are the differential oracle's (differential.Oracle).
"""
from __future__ import annotations

import dataclasses
import pickle
import re
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compiler import analysis
from compiler.core.diagnostics import Diagnostic
from compiler.ir import nodes as ir
from compiler.oracle import differential, dynamic_sizes, interp, tolerance, validate
from compiler.oracle.differential import Failure, Unit
from compiler.oracle.progen.case import Case
from compiler.oracle.progen.generic import NAMES
from compiler.oracle.progen.render import type_text, used_generics
from compiler.runtime.arrays import Array
from compiler.snapshot import Snapshot

# What can go wrong, by who is wrong: the dynamic library ("mismatch" against the
# interpreter, "static" against the statically bound library, "crash", "build"), the
# statically bound library ("static-mismatch", "static-crash", "static-build"), or the
# references ("reference": the interpreter; "generator": the program does not check, or a
# generic helper is not exported dynamic).
MISMATCH_KINDS = ("mismatch", "static", "static-mismatch")
CRASH_KINDS = ("build", "crash", "static-build", "static-crash", "reference", "generator")
KINDS = MISMATCH_KINDS + CRASH_KINDS
_SIZE_NAME = re.compile(rf"\b({'|'.join(NAMES)})\b")


@dataclass
class DynStats:
    programs: int = 0
    exports: int = 0        # dynamic exports checked
    runs: int = 0           # (export, size assignment) pairs with a reference
    calls: int = 0          # library calls compared (dynamic and static, every level)
    identical: int = 0      # dynamic results bitwise equal to the static build's
    compared: int = 0       # dynamic results compared with the static build's
    builds: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def add_time(self, phase: str, t0: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0


@dataclass
class _Run:
    """One dynamic export at one size assignment: its static function and program (the
    reference), the inputs, the keyword sizes and the interpreter's results."""
    fn: ir.Function
    sizes: dict[str, int]
    inputs: list[Array]
    want: validate.References


def rename_sizes(text: str, name: str) -> str:
    """The program `name`'s sizes under names of its own (`A` -> `A_c17`); the generator
    writes sizes only as A, B, C, and nothing else under those names."""
    return _SIZE_NAME.sub(rf"\1_{name}", text)


def generic_only(text: str) -> str:
    """The generic functions (`fn name[..](..)`) of a source, without the others."""
    blocks = re.split(r"(?m)^(?=fn )", text)
    return "".join(b for b in blocks if re.match(r"fn \w+\[", b))


def gradient_wrappers(case: Case, name: str) -> str:
    """`fn name_d1[A, B](x1: ..) -> (R, dx1) { handle name_s1[A, B](x1) with reverseMode }`
    for each generic helper the program writes: generic too, so a dynamic export whose
    reverse mode runs at every size (the bodies obey the reverseMode restrictions)."""
    out = []
    for fn in used_generics(case):
        sizes = ", ".join(fn.sizes)
        ps = ", ".join(f"{p.name}: {type_text(p.type)}" for p in fn.params)
        outs = [type_text(fn.types()[fn.result])] + [type_text(p.type) for p in fn.params if p.type.is_float]
        call = f"handle {name}_s{fn.index}[{sizes}]({', '.join(p.name for p in fn.params)}) with reverseMode"
        out.append(f"\nfn {name}_d{fn.index}[{sizes}]({ps}) -> ({', '.join(outs)}) {{\n  let r = {call} in\n  r\n}}\n")
    return "".join(out)


def unit_of_case(name: str, case: Case, grad: bool = False) -> Unit:
    """The unit of one generated program (with `grad`, its helpers' gradient_wrappers too);
    its functions (the dynamic exports) are found in the program (`_dynamic_exports`),
    since the renderer leaves out helpers nothing calls."""
    text = case.source(name) + (gradient_wrappers(case, name) if grad else "")
    return Unit(name, rename_sizes(text, name), [], case=case)


def size_runs(fns: list[ir.Function], name: str, seed: int) -> list[dict[str, int]]:
    """The program's three assignments (all ones, two random): a function of its name and
    the run's seed only, so a shrinking replay of one program sees the same sizes."""
    return dynamic_sizes.size_runs(fns, zlib.crc32(name.encode()) ^ seed)


class DynamicOracle:
    def __init__(self, work_dir: str | Path, levels: Iterable[int] = (0, 2), seed: int = 0, grad: bool = False,
                 build_timeout: float = 900, run_timeout: float = 600) -> None:
        self.base = differential.Oracle(work_dir, levels=tuple(levels), use_torch=False, fd=False,
                                        build_timeout=build_timeout, run_timeout=run_timeout)
        self.work, self.levels, self.seed, self.grad = Path(work_dir), tuple(levels), seed, grad
        self.stats = DynStats()
        self._batches = 0
        # the results of one batch's calls: (level, "dyn" or run k's static build, export, run k) -> results
        self._got: dict[tuple[int, int | str, str, int], list[Array]] = {}

    def run_batch(self, named: list[tuple[str, Case]]) -> list[Failure]:
        """Check the dynamic exports of the generic cases among `named` (the others are skipped)."""
        units = [unit_of_case(n, c, self.grad) for n, c in named if c.generics]
        return self.run_units(units) if units else []

    def run_units(self, units: list[Unit]) -> list[Failure]:
        self._batches += 1
        work = self.work / f"dyn{self._batches}"
        work.mkdir(parents=True, exist_ok=True)
        failures: list[Failure] = []
        units = self.base._typecheck(units, failures)
        src = work / "batch.kina"
        src.write_text(differential._module(units))
        t0 = time.perf_counter()
        snap = analysis.analyze(src.read_text(), str(src))
        dyn_program, diags = snap.program_for({})     # every generic function exported dynamic
        units = self._dynamic_exports(dyn_program, diags, units, failures)
        if not units:
            return failures
        self.stats.programs += len(units)
        self.stats.exports += sum(len(u.functions) for u in units)
        runs = self._size_runs(dyn_program, units)
        # The static builds need only the generic functions (smaller builds).
        generic_units = [dataclasses.replace(u, source=generic_only(u.source)) for u in units]
        static_src = work / "generic.kina"
        static_src.write_text(differential._module(generic_units))
        libs: list[tuple[int | str, dict[str, int] | None]] = [("dyn", None), *enumerate(runs)]
        builds = {(lv, k): self.base._start_build(static_src if sizes else src, work / f"O{lv}-{k}" / "lib.so", lv,
                                                  sizes)
                  for lv in self.levels for k, sizes in libs}
        refs = self._references(snap, dyn_program, units, runs, failures)
        self.stats.add_time("references", t0)
        for (lv, k), build in builds.items():
            static = k != "dyn"
            kind = "static-build" if static else "build"
            for so, part in self.base._finish_build(build, static_src if static else src, lv,
                                                    generic_units if static else units, work / f"O{lv}-{k}",
                                                    failures, runs[k] if isinstance(k, int) else None, kind):
                self._run(so, part, refs, lv, k, failures)
        self._compare(refs, failures)
        self.stats.builds = self.base.stats.builds
        by_name = {u.name: u.case for u in units}
        for f in failures:
            f.case = f.case or by_name.get(f.name)
        return failures

    # ---- what to check -----------------------------------------------------------------------
    def _dynamic_exports(self, program: ir.Program, diags: list[Diagnostic], units: list[Unit],
                         failures: list[Failure]) -> list[Unit]:
        """Each unit with its dynamic exports (in `program_for({})`, every generic function
        is exported dynamic: no size is bound)."""
        dynamic = sorted(n for n, fn in program.functions.items() if fn.sizes and ir.is_export(n))
        out = []
        for u in units:
            u.functions = [n for n in dynamic if re.fullmatch(rf"{re.escape(u.name)}_[sd]\d+", n)]
            written = re.findall(rf"\bfn ({re.escape(u.name)}_[sd]\d+)\[", u.source)
            missing = sorted(set(written) - set(u.functions))
            if diags or missing:
                detail = "; ".join([d.message for d in diags] + [f"{n} is not exported dynamic" for n in missing])
                failures.append(Failure(u.name, "generator", None, detail, u.case, u.source))
            elif u.functions:
                out.append(u)
        return out

    def _size_runs(self, program: ir.Program, units: list[Unit]) -> list[dict[str, int]]:
        """The batch's assignments: run k binds every program's sizes at that program's k-th assignment."""
        runs: list[dict[str, int]] = [{} for _ in range(dynamic_sizes.RUNS)]
        for u in units:
            for k, run in enumerate(size_runs([program.functions[f] for f in u.functions], u.name, self.seed)):
                runs[k].update(run)
        return runs

    def _references(self, snap: Snapshot, dyn_program: ir.Program, units: list[Unit], runs: list[dict[str, int]],
                    failures: list[Failure]) -> dict[tuple[str, int], _Run]:
        """(export, run) -> its inputs and the interpreter's results on the static program at the run's sizes."""
        refs: dict[tuple[str, int], _Run] = {}
        for k, run in enumerate(runs):
            static, _ = snap.program_for(run, want_dynamic=False)
            for u in units:
                for name in u.functions:
                    fn = static.functions.get(name)
                    own = ir.reachable(static, {name}) if fn is not None else None
                    try:
                        if fn is None or own is None:
                            raise KeyError(f"{name} is not in the static program at {run}")
                        inputs = interp.random_inputs(fn, self.seed + k, own)
                        want = validate.references(own, name, inputs)
                    except Exception as e:   # reported per program, the others go on
                        failures.append(Failure(u.name, "reference", None,
                                                f"{_label(dyn_program, name, run)}: {type(e).__name__}: {e}"))
                        continue
                    refs[(name, k)] = _Run(fn, dynamic_sizes.sizes_of(dyn_program.functions[name], run), inputs,
                                           want)
        self.stats.runs += len(refs)
        return refs

    # ---- running ---------------------------------------------------------------------------
    def _run(self, so: Path, part: list[Unit], refs: dict[tuple[str, int], _Run], level: int, lib: int | str,
             failures: list[Failure]) -> None:
        """Call the library `lib` ("dyn", or run k's static build) on its runs' inputs;
        results are kept in `self._got[(level, lib, export, run)]`."""
        t0 = time.perf_counter()
        work = so.parent
        keys = {f"{name}{validate.RUN_MARK}{k}": (name, k) for u in part for name in u.functions
                for k in range(dynamic_sizes.RUNS) if (name, k) in refs and (lib == "dyn" or lib == k)}
        owner = {name: u.name for u in part for name in u.functions}
        for key, (name, k) in keys.items():
            with open(work / f"{key}.in.pkl", "wb") as fh:
                pickle.dump((refs[(name, k)].inputs, refs[(name, k)].sizes if lib == "dyn" else {}), fh)

        def on_done(key: str, error: str | None) -> None:
            name, k = keys[key]
            self.stats.calls += 1
            where = "the dynamic library" if lib == "dyn" else "the static library"
            if error is not None:
                failures.append(Failure(owner[name], "crash" if lib == "dyn" else "static-crash", level,
                                        f"{_run_label(name, refs[(name, k)])}: {where} {error}"))
                return
            self._got[(level, lib, name, k)] = validate.load_outputs(work, key)

        validate.run_in_child(so, work, list(keys), timeout=self.base.run_timeout, cancel=None, on_done=on_done)
        self.stats.add_time(f"run -O{level}", t0)

    # ---- comparing -------------------------------------------------------------------------
    def _compare(self, refs: dict[tuple[str, int], _Run], failures: list[Failure]) -> None:
        got, self._got = self._got, {}
        owner = {name: name.rpartition("_")[0] for name, _ in refs}
        for (level, lib, name, k), out in sorted(got.items(), key=lambda kv: str(kv[0])):
            run = refs[(name, k)]
            rep = validate.FunctionReport(name)
            validate.check_results(rep, run.fn, out, run.want)
            bad = [c for c in rep.checks if not c.ok]
            if bad:
                kind = "mismatch" if lib == "dyn" else "static-mismatch"
                failures.append(Failure(owner[name], kind, level, f"{_run_label(name, run)}: "
                                        + "; ".join(differential._describe(c) for c in bad)))
            static = got.get((level, k, name, k))
            if lib == "dyn" and static is not None:
                self._against_static(owner[name], name, run, out, static, level, failures)

    def _against_static(self, owner: str, name: str, run: _Run, dyn: list[Array],
                        static: list[Array], level: int, failures: list[Failure]) -> None:
        """The dynamic results against the statically bound library's, by the same rule
        (the static results in the reference's place, with the interpreter's magnitudes)."""
        _, _, *rest = run.want
        magnitudes = rest[0] if rest else [None] * len(static)
        dtypes = validate._result_dtypes(run.fn)
        checks = [tolerance.compare(f"result {i}", d, s, dt, f"static build -O{level}", magnitude=m)
                  for i, (d, s, m, dt) in enumerate(zip(dyn, static, magnitudes, dtypes))]
        self.stats.compared += 1
        self.stats.identical += all(_same(d, s) for d, s in zip(dyn, static))
        bad = [c for c in checks if not c.ok]
        if bad or len(dyn) != len(static):
            failures.append(Failure(owner, "static", level, f"{_run_label(name, run)}: "
                                    + ("; ".join(differential._describe(c) for c in bad)
                                       or f"{len(dyn)} results, the static build {len(static)}")))


def _same(a: Array, b: Array) -> bool:
    import numpy as np
    return bool(np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))


def _label(program: ir.Program, name: str, run: Mapping[str, int]) -> str:
    fn = program.functions.get(name)
    return dynamic_sizes.label(fn, run) if fn is not None else name


def _run_label(name: str, run: _Run) -> str:
    return f"{name}[{', '.join(f'{k}={v}' for k, v in run.sizes.items())}]"


# ---- runs ----------------------------------------------------------------------------------
def still_fails(failure: Failure, work_dir: Path, seed: int = 0, grad: bool = False) -> Callable[[Case], bool]:
    """A predicate for compiler/oracle/shrink.py: does a case still fail the way `failure` did
    (the same kind at the same level; the sizes are the same, drawn from its name)?"""
    levels = (failure.level,) if failure.level is not None else (0,)
    oracle = DynamicOracle(work_dir, levels=levels, seed=seed, grad=grad)

    def test(case: Case) -> bool:
        return any(f.kind == failure.kind and f.level == failure.level
                   for f in oracle.run_batch([(failure.name, case)]))
    return test
