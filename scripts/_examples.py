"""Shared helpers of the model-example validation scripts (validate_mlp_classifier.py,
validate_decoder_block.py, validate_adamw.py, validate_greedy.py).

- `build_levels(name)` builds examples/<name>.kina at -O0 and -O2 with compiler.build
  (examples/storylm.kina at StoryLM-0's sizes) and loads both libraries (every check of a script runs against both);
- `run(name, check)` is a script's whole main(): the torch banner, a Report, the
  build at every level, then `check(report, built, torch)`; returns the exit code;
- `main_inputs(program)` reads the host placeholders of the example's `main` (its
  literal lets) as NumPy arrays, so the script and the example share one copy of the
  data.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from report import Report, torch_banner
from storylm_data import EXAMPLES, SIZES

LEVELS = (0, 2)


class Built:
    """One example built at every level: `libs[level]`, and the checked program."""

    def __init__(self, name: str, libs: dict, program):
        self.name, self.libs, self.program = name, libs, program


def build_levels(name: str, rep: Report) -> Built | None:
    """Build examples/<name>.kina at -O0 and -O2; a failure is a failed check (None)."""
    from compiler.build import build_file
    from compiler.runtime.library import load
    out = Path(tempfile.mkdtemp(prefix=f"kina_{name}_"))
    libs, program = {}, None
    for level in LEVELS:
        res = build_file(str(EXAMPLES / f"{name}.kina"), out / f"{name}_O{level}.so", level,
                         sizes=SIZES if name == "storylm" else None)
        if not rep.check(f"build examples/{name}.kina at -O{level}", res.ok,
                         "" if res.ok else f"{len(res.diagnostics)} diagnostic(s)"):
            for d in res.diagnostics:
                print(res.source.render(d) if res.source else f"[{d.code}] {d.message}")
            return None
        libs[level] = load(str(res.so_path))
        program = res.program
    return Built(name, libs, program)


def main_inputs(program) -> dict[str, np.ndarray]:
    """The literal lets of `main`, by name, with their Kina dtypes."""
    from compiler.ir import nodes as ir
    from compiler.oracle.interp import NP_DTYPES
    out = {}
    for b in program.functions["main"].lets:
        lit = b.value
        if b.destructure or not isinstance(lit, ir.Literal):
            continue
        dtype = NP_DTYPES[lit.type.dtype]
        if not lit.values:
            out[b.names[0]] = np.zeros(lit.type.shape, dtype)
        elif len(lit.values) == 1:
            out[b.names[0]] = np.full(lit.type.shape, lit.values[0], dtype)
        else:
            out[b.names[0]] = np.asarray(lit.values, dtype).reshape(lit.type.shape)
    return out


def run(name: str, check: Callable[[Report, Built, Any], None]) -> int:
    """A validation script's main(): build examples/<name>.kina at every level and run
    check(report, built, torch) (torch is None when not installed); a build failure is a
    failed check.  Returns the process exit code (1 on any mismatch)."""
    torch = torch_banner()
    rep = Report()
    built = build_levels(name, rep)
    if built is not None:
        check(rep, built, torch)
    return rep.exit_code()
