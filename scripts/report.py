"""Reporting and build-and-check helpers of the validation scripts.

- `Report` prints one line per comparison with its max error and remembers
  failures, so a script ends with `sys.exit(report.exit_code())`; `section`
  prints a heading; `torch_banner` imports torch or prints the skip line;
- `compile_example` builds an example to a host .so through compiler.build and
  loads it with compiler.runtime.library (`BuildFailed` when it does not compile);
  StoryLM-0 is compile_example("storylm"): examples/storylm.kina built with
  --size B=1 --size T=4 --size H=2 --size DH=2 --size V=8 (storylm_data.SIZES);
- `run_example_checks` is a whole main(): banner, Report, build, checks.

Builds on storylm_data (the examples directory; importing it makes the compiler
importable) and storylm_torch (`torch_or_none`).  Used by every validate_*.py
(and _examples.py, the model examples' build-at-every-level helper),
vocab_parallel_storylm0.py, train_storylm0.py, _dist_lm.py,
benchmarks/bench_train.py and tests/test_training.py.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from storylm_data import EXAMPLES, SIZES
from storylm_torch import torch_or_none


def compile_example(name: str, out_dir: str | Path | None = None, sizes: dict[str, int] | None = None):
    """Build examples/<name>.kina (`name` may be `distributed/lm_vocab_parallel`) to a .so with
    compiler.build, its generic functions bound by `sizes` (`--size`; examples/storylm.kina
    defaults to StoryLM-0's), and load it with compiler.runtime.library."""
    from compiler.build import build_file
    from compiler.runtime.library import load
    sizes = SIZES if sizes is None and name == "storylm" else sizes
    tag = "".join(f"_{k}{v}" for k, v in (sizes or {}).items())   # one file per size: dlopen caches paths
    out = Path(out_dir or tempfile.mkdtemp(prefix="kina_storylm0_")) / f"lib{Path(name).name}{tag}.so"
    result = build_file(str(EXAMPLES / f"{name}.kina"), out_so=str(out), opt_level=2, sizes=sizes)
    if not result.ok:
        rendered = [result.source.render(d) if result.source else f"[{d.code}] {d.message}"
                    for d in result.diagnostics]
        raise BuildFailed(f"building examples/{name}.kina failed:\n" + "\n".join(rendered))
    return load(str(result.so_path))


class BuildFailed(RuntimeError):
    """An example did not compile; the message holds the rendered diagnostics."""


def run_example_checks(prefix: str, checks) -> int:
    """Compile each (example, check) pair's example and run check(report, lib, torch);
    a build failure is reported as a failed check.  Returns the process exit code."""
    torch = torch_banner()
    rep = Report()
    out = tempfile.mkdtemp(prefix=prefix)
    for example, check in checks:
        try:
            lib = compile_example(example, out)
        except BuildFailed as e:
            print(e)
            rep.check(f"build {example}.kina", False)
            continue
        check(rep, lib, torch)
    return rep.exit_code()


@dataclass
class Report:
    """Prints each comparison (`name  max|err| = ...  ok/MISMATCH`) and remembers failures."""
    failures: list[str] = field(default_factory=list)
    count: int = 0

    def compare(self, name: str, got, want, atol: float = 1e-4, rtol: float = 1e-4) -> bool:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        self.count += 1
        if got.shape != want.shape:
            print(f"  {name:<58} shape {got.shape} != {want.shape}  MISMATCH")
            self.failures.append(name)
            return False
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        ok = bool(np.allclose(got, want, atol=atol, rtol=rtol))
        print(f"  {name:<58} max|err| = {err:.3e}  {'ok' if ok else 'MISMATCH'}")
        if not ok:
            self.failures.append(name)
        return ok

    def check(self, name: str, condition: bool, detail: str = "") -> bool:
        self.count += 1
        print(f"  {name:<58} {detail}  {'ok' if condition else 'FAILED'}")
        if not condition:
            self.failures.append(name)
        return condition

    def exit_code(self) -> int:
        if self.failures:
            print(f"FAILED: {len(self.failures)} of {self.count} comparisons: {', '.join(self.failures)}")
            return 1
        print(f"all {self.count} comparisons passed")
        return 0


def section(title: str) -> None:
    print(f"\n== {title}")


def torch_banner():
    """Import torch or print the skip line the validation scripts promise."""
    torch = torch_or_none()
    if torch is None:
        print("torch: skipped (not installed)")
    else:
        print(f"torch: {torch.__version__}")
    return torch
