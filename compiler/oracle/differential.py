"""The differential oracle: generated programs (compiler/oracle/progen/generate.py) compiled at -O0 and
-O2 and checked against references that share no code with the compiler's back end.

    oracle = Oracle(work_dir)
    failures = oracle.run_batch([("c0", case0), ("c1", case1), ...])

One batch is ONE Kina module and one `kinac build` per -O level (a build costs far more
than a case), each build in a child process so an abort or a segfault costs one build, not
the run.  A batch whose build fails is bisected until the failing cases are alone.  Each
function then runs in a child process too (validate.run_in_child, restarted after a
crash), and every output is held to `tolerance.check_output`, the rule `kinac validate`
uses, against:

- the NumPy interpreter in float64 (the reference), or in the declared dtype when the
  program is ill-conditioned at that dtype;
- PyTorch in float64 (compiler/oracle/torch_ref.py, when importable), with `handle` evaluated by
  autograd: checks the interpreter and the VJPs against an independent implementation;
- for a program under reverseMode (one in differential_runs.VJP_EVERY), its VJP export
  `f_vjp(x.., g_y)` (`--vjp f`; dynamic for a size-generic helper a wrapper differentiates)
  at a random cotangent g_y, against the interpreter's f_vjp in float64, by the same rule;
- for a program that draws random numbers, a probe returning every random value
  (progen/probe.py), bit for bit against the interpreter in the declared dtype;
- for every differentiated function, float64 central finite differences of the sum of
  its result along a random direction per parameter, against the float64 interpreter's
  reverse mode (the backward graph the compiler emits), at a slightly jittered point,
  re-drawn while the step reaches a kink (compiler/oracle/kinks.py, the rule `kinac
  validate` uses too).

Failures are values (`Failure`): kind "generator" (the program did not type-check),
"reference" (the interpreter failed), "build", "crash", "mismatch", "vjp" (a VJP export),
"bits" (a random value), "torch" or "fd" (compiler/oracle/differential_runs.py has the VJP and
random-value runs).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from compiler import ad as autodiff
from compiler import analysis
from compiler.ir import nodes as ir
from compiler.ir.nodes import Program
from compiler.oracle import interp, kinks, tolerance, validate
from compiler.oracle.differential_runs import ExtraRun, bit_differences, extras_of, probes_in, result_ops, with_vjps
from compiler.oracle.progen import generate as progen
from compiler.oracle.progen.case import Case

TORCH_TOLERANCE = (1e-9, 1e-7)     # float64 against float64: only libm and summation order differ
FD_STEP = 1e-6                     # in float64; jitter of the point where gradients are checked
FD_JITTER = 1e-3
FD_POINTS = (1, 2, 3)              # seeds of the jittered points (re-drawn while the step reaches a kink)
FD_TOLERANCE = 1e-5                # |ad - fd| <= FD_TOLERANCE * (1 + sum |g * v|) + the rounding below
FD_ROUNDING = 64                   # ulps of sum |outputs| the two float64 evaluations may differ by


@dataclass
class Failure:
    name: str               # the case's function name (its wrapper is name_g)
    kind: str
    level: int | None
    detail: str
    case: Case | None = None
    source: str | None = None     # the whole module, when only cases together fail

    def headline(self) -> str:
        where = f" at -O{self.level}" if self.level is not None else ""
        return f"{self.name}: {self.kind}{where}: {self.detail.splitlines()[0] if self.detail else ''}"


@dataclass
class Stats:
    cases: int = 0
    ad_cases: int = 0
    generic_cases: int = 0        # with size-generic helpers (progen/generic.py)
    functions: int = 0
    builds: int = 0
    ill_conditioned: int = 0      # outputs held to the same-dtype reference
    torch_checked: int = 0
    fd_checked: int = 0
    fd_kink_skipped: int = 0      # parameters whose step reached a kink at every point
    vjp_checked: int = 0          # VJP export calls compared (static and dynamic)
    vjp_dynamic: int = 0          # of which dynamic exports
    bits_cases: int = 0           # programs whose random values were compared bit for bit
    bits_values: int = 0          # random values (results of the probes) compared, every level
    seconds: dict[str, float] = field(default_factory=dict)

    def add_time(self, phase: str, t0: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0


@dataclass
class _Ref:
    inputs: list[np.ndarray]
    want: validate.References    # (float64 results, declared-dtype results, magnitudes)
    run: ExtraRun | None = None  # an extra run (a VJP export, a random probe)
    fn: ir.Function | None = None   # its reference function


@dataclass
class _Build:
    """A `kinac build` child process, the library it writes and when it started."""
    proc: subprocess.Popen[str]
    so: Path
    t0: float


class Oracle:
    def __init__(self, work_dir: str | Path, levels: Sequence[int] = (0, 2), use_torch: bool | None = None,
                 fd: bool = True, build_timeout: float = 900, run_timeout: float = 600,
                 vjp: bool = True, bits: bool = True) -> None:
        from compiler.oracle import torch_ref
        self.work = Path(work_dir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.levels = tuple(levels)
        self.use_torch = torch_ref.available() if use_torch is None else use_torch
        self.fd, self.vjp, self.bits = fd, vjp, bits
        self.build_timeout, self.run_timeout = build_timeout, run_timeout
        self.stats = Stats()
        self._batches = 0

    # ---- one batch ---------------------------------------------------------------------
    def run_batch(self, named: list[tuple[str, Case]]) -> list[Failure]:
        """Check generated cases (each under its own function names) in one library per level."""
        units = []
        for name, case in named:
            more = extras_of(name, case, vjp=self.vjp, bits=self.bits)
            units.append(Unit(name, case.source(name) + more.source, case.functions(name), case.handled(name), case,
                              case.helpers(name), more.runs, more.vjp))
        return self.run_units(units)

    def run_units(self, units: list[Unit]) -> list[Failure]:
        self._batches += 1
        work = self.work / f"batch{self._batches}"
        work.mkdir(parents=True, exist_ok=True)
        failures: list[Failure] = []
        units = self._typecheck(units, failures)
        if not units:
            return failures
        self.stats.cases += len(units)
        self.stats.ad_cases += sum(bool(u.handled) for u in units)
        self.stats.generic_cases += sum(bool(u.case and u.case.generics) for u in units)
        src = work / "batch.kina"
        src.write_text(_module(units))
        vjp = [v for u in units for v in u.vjp]
        pending = {lv: self._start_build(src, work / f"O{lv}" / "lib.so", lv, vjp=vjp) for lv in self.levels}
        t0 = time.perf_counter()
        program = analysis.analyze(src.read_text(), str(src)).program
        program = with_vjps(program, [r for u in units for r in u.extras])
        refs = self._references(program, units, failures)
        self.stats.add_time("references", t0)
        for level, proc in pending.items():
            for so, part in self._finish_build(proc, src, level, units, work, failures):
                self._run_and_compare(so, part, program, refs, level, failures)
        by_name = {u.name: u.case for u in units}
        for f in failures:
            f.case = f.case or by_name.get(f.name)
        return failures

    def _typecheck(self, units: list[Unit], failures: list[Failure]) -> list[Unit]:
        ok: list[Unit] = []
        for u in units:
            diags = [d for d in analysis.analyze(u.source).diagnostics if d.severity == "error"]
            if diags:
                failures.append(Failure(u.name, "generator", None, "; ".join(f"[{d.code}] {d.message}" for d in diags),
                                        u.case))
            else:
                ok.append(u)
        return ok

    # ---- references ----------------------------------------------------------------------
    def _references(self, program: Program, units: list[Unit], failures: list[Failure]) -> dict[str, _Ref]:
        lowered_all, _ = autodiff.lower_handles(program)
        refs: dict[str, _Ref] = {}
        for u in units:
            # Each unit on its own: the interpreter re-lowers the program it is given per call.
            roots = set(u.functions) | set(u.handled) | set(u.helpers) | {r.ref for r in u.extras}
            own = set(ir.reachable(lowered_all, roots).functions) | roots
            lowered = Program({f: fn for f, fn in lowered_all.functions.items()
                               if f in own or f.split(".")[0] in own})
            try:
                for fname in u.functions:
                    fn = program.functions[fname]
                    args = interp.random_inputs(fn, 0, program)
                    refs[fname] = _Ref(args, validate.references(lowered, fname, args))
                    self.stats.functions += 1
                    if self.use_torch:
                        self._torch(program, fname, refs[fname], failures, u.name)
                self._extra_references(lowered, u, refs, failures)
                for target in u.handled if self.fd else ():
                    args = interp.random_inputs(program.functions[target], 0, program)
                    self._finite_differences(lowered, target, args, failures, u.name)
            except Exception as e:   # the interpreter (or torch) failed on a well-typed program
                failures.append(Failure(u.name, "reference", None, f"{type(e).__name__}: {e}"))
                for fname in [*u.functions, *(r.export for r in u.extras)]:
                    refs.pop(fname, None)
        return refs

    def _extra_references(self, lowered: Program, u: Unit, refs: dict[str, _Ref], failures: list[Failure]) -> None:
        """The references of a unit's VJP exports and random probe (differential_runs.py)."""
        for run in u.extras:
            fn = lowered.functions.get(run.ref)
            if fn is None:     # transform_vjp refused what reverseMode accepted: the generator is wrong
                failures.append(Failure(u.name, "generator", None, f"no reference function {run.ref} for {run.export}"))
                continue
            args = interp.random_inputs(fn, 0, lowered)
            refs[run.export] = _Ref(args, validate.references(lowered, run.ref, args), run, fn)

    def _torch(self, program: Program, fname: str, ref: _Ref, failures: list[Failure], name: str) -> None:
        from compiler.oracle import torch_ref
        got = validate._flat(torch_ref.run_function(program, fname, ref.inputs))
        tol = {dt: TORCH_TOLERANCE for dt in tolerance.TOLERANCES}
        fn = program.functions[fname]
        bad = [c for i, (g, w, dt) in enumerate(zip(got, ref.want[0], validate._result_dtypes(fn)))
               if not (c := tolerance.compare(f"result {i}", g, w, dt, "torch (f64)", tol)).ok]
        self.stats.torch_checked += 1
        if bad:
            failures.append(Failure(name, "torch", None, f"{fname}: PyTorch (float64) and the interpreter (float64) "
                                    f"differ: " + "; ".join(_describe(c) for c in bad)))

    def _finite_differences(self, lowered: Program, name: str, args: list[np.ndarray], failures: list[Failure],
                            owner: str) -> None:
        """The float64 backward graph against central differences along a random direction
        per parameter, at a jittered point.  Where the step reaches a kink
        (compiler/oracle/kinks.py: low-precision parameters tie often, F8 has 256 values, and
        the 1e-3 jitter can leave a tie of maximum closer than the step) the difference
        checks nothing: that parameter is re-drawn at the next point of FD_POINTS, and
        counted in stats.fd_kink_skipped if it is at a kink at every one.  A difference
        whose step reaches no kink is a derivative: a disagreement there is a failure."""
        pending = {j for j, p in enumerate(lowered.functions[name].params) if p.type.is_float}
        for seed in FD_POINTS:
            for j, failure in self._fd_at(lowered, name, args, owner, np.random.default_rng(seed)).items():
                if j in pending and failure is not None:
                    failures.append(failure)
                pending.discard(j)
            if not pending:
                break
        self.stats.fd_checked += 1
        self.stats.fd_kink_skipped += len(pending)

    def _fd_at(self, lowered: Program, name: str, args: list[np.ndarray], owner: str,
               rng: np.random.Generator) -> dict[int, Failure | None]:
        """Parameter index -> its failure (None: agrees) at one jittered point, for the
        parameters whose step reaches no kink (the others are left out)."""
        fn = lowered.functions[name]
        x = [a.astype(np.float64) + FD_JITTER * rng.standard_normal(a.shape) if p.type.is_float else a
             for a, p in zip(args, fn.params)]      # I64 and Bool stay as they are
        grads = validate._flat(interp.run_function(lowered, f"{name}.rev", x, dtype=np.float64))[1:]
        _, base = kinks.trace(lowered, name, x, np.float64)

        def side(j: int, dx: np.ndarray) -> tuple[tuple[float, float], list[np.ndarray]]:
            xs = list(x)
            xs[j] = x[j] + dx
            value, sites = kinks.trace(lowered, name, xs, np.float64)
            flat = np.asarray(value, dtype=np.float64)
            return (float(np.sum(flat)), float(np.sum(np.abs(flat)))), sites

        out: dict[int, Failure | None] = {}
        floats = [j for j, p in enumerate(fn.params) if p.type.is_float]
        for j, g in zip(floats, grads):
            v = rng.standard_normal(x[j].shape)
            ((f_plus, a_plus), k_plus), ((f_minus, a_minus), k_minus) = side(j, FD_STEP * v), side(j, -FD_STEP * v)
            if kinks.classify(base, k_plus, k_minus) != kinks.SMOOTH:
                continue
            fd = (f_plus - f_minus) / (2 * FD_STEP)
            ad = float(np.sum(g * v))
            # The float64 rounding of the two sums, divided by the step: where the outputs are
            # huge (exp(x * x) at x ~ 7 is 1e21) a change of FD_STEP is lost in it and the
            # difference says nothing (a found case: 0 against a gradient of -27).
            rounding = FD_ROUNDING * np.finfo(np.float64).eps * (a_plus + a_minus) / (2 * FD_STEP)
            tol = FD_TOLERANCE * (1 + float(np.sum(np.abs(g * v)))) + rounding
            out[j] = None if abs(ad - fd) <= tol else Failure(
                owner, "fd", None, f"{name}: d/d {fn.params[j].name} along a random direction: "
                f"reverse mode {ad:.9g}, finite differences {fd:.9g} (tolerance {tol:.1e})")
        return out

    # ---- building --------------------------------------------------------------------------
    def _start_build(self, src: Path, so: Path, level: int, sizes: Mapping[str, int] | None = None,
                     vjp: Sequence[str] = ()) -> _Build:
        """`kinac build` in a child process; `sizes`: its `--size` values (none: every
        generic function is exported dynamic); `vjp`: its `--vjp` names."""
        so.parent.mkdir(parents=True, exist_ok=True)
        self.stats.builds += 1
        cmd = [sys.executable, "-P", "-m", "compiler.cli", "build", str(src.resolve()), "-o", str(so.resolve()),
               f"-O{level}", *(f"--size={k}={v}" for k, v in (sizes or {}).items()), *(f"--vjp={n}" for n in vjp)]
        env = dict(os.environ, PYTHONSAFEPATH="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                            os.environ.get("PYTHONPATH")])))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=str(so.parent.resolve()))
        return _Build(proc, so, time.perf_counter())

    def _wait(self, build: _Build, level: int) -> tuple[bool, str]:
        proc = build.proc
        try:
            _, err = proc.communicate(timeout=self.build_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            return False, f"the build timed out after {self.build_timeout:.0f} s"
        finally:
            self.stats.add_time(f"build -O{level}", build.t0)
        if proc.returncode == 0:
            return True, ""
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return False, f"kinac build -O{level} failed ({how}):\n{err.strip()[-4000:]}"

    def _finish_build(self, build: _Build, src: Path, level: int, units: list[Unit], work: Path,
                      failures: list[Failure], sizes: Mapping[str, int] | None = None,
                      kind: str = "build") -> list[tuple[Path, list[Unit]]]:
        """[(library, units in it)], bisecting the batch until every failing unit is alone."""
        ok, err = self._wait(build, level)
        if ok:
            return [(build.so, units)]
        if len(units) == 1:
            failures.append(Failure(units[0].name, kind, level, err))
            return []
        before = len(failures)
        out = self._bisect(src, level, units, work, failures, sizes, kind)
        if len(failures) == before:   # every part builds alone: the cases interact (or the build is flaky)
            failures.append(Failure(f"{units[0].name}..{units[-1].name}", kind, level,
                                    f"the {len(units)} cases fail to build together, but each part builds "
                                    f"alone:\n{err}", source=_module(units)))
        return out

    def _bisect(self, src: Path, level: int, units: list[Unit], work: Path, failures: list[Failure],
                sizes: Mapping[str, int] | None = None, kind: str = "build") -> list[tuple[Path, list[Unit]]]:
        half = len(units) // 2
        out: list[tuple[Path, list[Unit]]] = []
        for k, part in enumerate((units[:half], units[half:])):
            sub = work / f"{src.stem}_{k}"
            sub.mkdir(parents=True, exist_ok=True)
            part_src = sub / "part.kina"
            part_src.write_text(_module(part))
            build = self._start_build(part_src, sub / f"O{level}" / "lib.so", level, sizes,
                                      [v for u in part for v in u.vjp])
            out += self._finish_build(build, part_src, level, part, sub, failures, sizes, kind)
        return out

    # ---- running and comparing -----------------------------------------------------------
    def _run_and_compare(self, so: Path, part: list[Unit], program: Program, refs: dict[str, _Ref], level: int,
                         failures: list[Failure]) -> None:
        t0 = time.perf_counter()
        work = so.parent
        owner = {f: u.name for u in part for f in [*u.functions, *(r.export for r in u.extras)]}
        names = [f for f in owner if f in refs]
        for f in names:
            run = refs[f].run
            validate.write_inputs(work, f, refs[f].inputs, dict(run.sizes) if run else None)

        def on_done(fname: str, error: str | None) -> None:
            if error is not None:
                failures.append(Failure(owner[fname], "crash", level, f"{fname}: the library {error}"))
                return
            got = validate.load_outputs(work, fname)
            ref = refs[fname]
            if ref.run is not None and ref.run.check == "bits":
                self._compare_bits(owner[fname], fname, ref, got, level, failures)
                return
            rep = validate.FunctionReport(fname)
            validate.check_results(rep, ref.fn or program.functions[fname], got, ref.want)
            self.stats.ill_conditioned += sum(c.reference.startswith("interp (") and "f64" not in c.reference
                                              for c in rep.checks)
            bad = [c for c in rep.checks if not c.ok]
            if ref.run is not None:      # a VJP export
                self.stats.vjp_checked += 1
                self.stats.vjp_dynamic += ref.run.dynamic
            if bad:
                failures.append(Failure(owner[fname], "mismatch" if ref.run is None else "vjp", level,
                                        f"{_label(fname, ref)}: " + "; ".join(_describe(c) for c in bad)))

        validate.run_in_child(so, work, names, timeout=self.run_timeout, cancel=None, on_done=on_done)
        self.stats.add_time(f"run -O{level}", t0)

    def _compare_bits(self, owner: str, fname: str, ref: _Ref, got: list[np.ndarray], level: int,
                      failures: list[Failure]) -> None:
        """A random probe's results against the interpreter in the declared dtypes, bit for bit."""
        assert ref.fn is not None
        bad = bit_differences(got, ref.want[1], validate._result_dtypes(ref.fn), result_ops(ref.fn))
        self.stats.bits_cases += level == self.levels[0]
        self.stats.bits_values += len(got)
        if bad:
            failures.append(Failure(owner, "bits", level, f"{fname}: random values differ from the "
                                    f"interpreter's: " + "; ".join(bad)))


@dataclass
class Unit:
    """What one batch checks per program: its source (unique function names within the
    batch), the functions to run, the functions differentiated by a handle in it, and its
    other functions (helpers)."""
    name: str
    source: str
    functions: list[str]
    handled: list[str] = field(default_factory=list)
    case: Case | None = None
    helpers: list[str] = field(default_factory=list)
    extras: list[ExtraRun] = field(default_factory=list)   # VJP exports, random probe (differential_runs)
    vjp: list[str] = field(default_factory=list)           # the build's `--vjp` names


def unit_of_source(name: str, text: str) -> Unit:
    """A Unit for any Kina source: every exported function with parameters runs, every
    `handle`d function gets the finite-difference check, every `*_bits` function (a random
    probe, differential_runs.py) is compared bit for bit instead."""
    program = analysis.analyze(text).program
    if program is None:
        return Unit(name, text, [])
    probes = probes_in(program)
    bits = {r.export for r in probes}
    funcs = [f.name for f in program.functions.values() if f.params and ir.is_export(f.name) and f.name not in bits]
    handled = sorted({h.fn for fn in program.functions.values() for h in validate.handles_in(fn)})
    return Unit(name, text, funcs, handled, helpers=list(program.functions), extras=probes)


def rename_functions(text: str, prefix: str) -> str:
    """Prefix every function name (definitions, calls, handles, explicit instantiations
    `g[2, 3](..)`, generic definitions `fn g[A](..)`) so that several files can share one
    module (their lets, parameters and size names keep their names)."""
    import re
    names = re.findall(r"\bfn\s+([A-Za-z_]\w*)", text)
    for n in sorted(set(names), key=len, reverse=True):
        text = re.sub(rf"(?<![.\w]){re.escape(n)}(?=\s*[(\[])", prefix + n, text)
    return text


def _module(units: list[Unit]) -> str:
    return "\n".join(u.source for u in units)


def _label(fname: str, ref: _Ref) -> str:
    """`f`, or a dynamic export with its sizes: `f_s1_vjp[A=2, B=3]`."""
    sizes = ref.run.sizes if ref.run is not None else ()
    return fname + (f"[{', '.join(f'{k}={v}' for k, v in sizes)}]" if sizes else "")


def _describe(c: tolerance.OutputCheck) -> str:
    return f"{c.name} vs {c.reference}: {tolerance.describe_worst(c)}"


def case_names(seeds: Iterable[int]) -> list[str]:
    return [f"c{s}" for s in seeds]


# ---- runs ----------------------------------------------------------------------------------
MISMATCH_KINDS = ("mismatch", "vjp", "bits", "torch", "fd")          # wrong values
CRASH_KINDS = ("build", "crash", "reference", "generator")   # no values


class BatchOracle(Protocol):
    """What run_seeds drives: this module's Oracle, or dynamic_fuzz.DynamicOracle."""
    def run_batch(self, named: list[tuple[str, Case]]) -> list[Failure]: ...


def run_seeds(oracle: BatchOracle, seeds: Iterable[int], config: progen.GenConfig = progen.DEFAULT, batch: int = 50,
              on_batch: Callable[[int, list[Failure]], None] | None = None) -> list[Failure]:
    """Generate a case per seed and check them `batch` cases per library."""
    seeds = list(seeds)
    failures: list[Failure] = []
    for k in range(0, len(seeds), batch):
        named = [(f"c{s}", progen.generate(s, config)) for s in seeds[k:k + batch]]
        found = oracle.run_batch(named)
        failures += found
        if on_batch is not None:
            on_batch(k + len(named), found)
    return failures


def still_fails(failure: Failure, work_dir: Path, use_torch: bool | None = None) -> Callable[[Case], bool]:
    """A predicate for compiler/oracle/shrink.py: does a case still fail the way `failure` did?"""
    levels = (failure.level,) if failure.level is not None else ()
    oracle = Oracle(work_dir, levels=levels, use_torch=failure.kind == "torch" if use_torch is None else use_torch,
                    fd=failure.kind == "fd")

    def test(case: Case) -> bool:
        return any(f.kind == failure.kind and f.level == failure.level
                   for f in oracle.run_batch([(failure.name, case)]))
    return test


def reproducer(failure: Failure, case: Case, original: Case | None = None) -> str:
    """A standalone .kina file (functions f, f_g) with what failed and how to re-run it."""
    level = f" -O{failure.level}" if failure.level is not None else ""
    seed = f"--seed {original.seed}" if original is not None and original.seed is not None else ""
    size = (f", shrunk from {len(original.lets)} lets to {len(case.lets)}" if original is not None else "")
    detail = [f"//   {line}" for line in failure.detail.splitlines()[:8]]
    more = extras_of("f", case)        # its VJP exports and random probe, under the names f_vjp, f_bits
    vjp = "".join(f" --vjp {n}" for n in more.vjp) if failure.kind in ("vjp", "crash", "build") else ""
    how = (f"kinac validate{level}{vjp} FILE" if failure.kind in ("mismatch", "vjp", "crash", "build")
           else "scripts/fuzz_compile.py --replay FILE")
    return "\n".join([f"// A generated program that fails: {failure.kind}{level} "
                      f"(scripts/fuzz_compile.py {seed}, case {failure.name}{size}).", *detail,
                      f"// Reproduce: {how}", ""]) + case.source("f") + more.source
