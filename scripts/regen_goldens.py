#!/usr/bin/env python3
"""Regenerate the MLIR goldens: examples/NAME.mlir for every examples/NAME.kina that
compiles cleanly (parse -> check -> lower_handles -> emit).  `invalid_*` examples are
meant to fail and get no golden.  tests/test_goldens.py compares the emitter's output
with these files and runs them through mlir-opt.

    python scripts/regen_goldens.py            # rewrite every golden
    python scripts/regen_goldens.py ad_gather  # only examples/ad_gather.mlir
    python scripts/regen_goldens.py --check    # exit 1 if any golden is stale or missing

A generic example is emitted at the sizes SIZES gives it (examples/storylm.kina at
StoryLM-0's: `--size B=1 --size T=4 --size H=2 --size DH=2 --size V=8`).

Locations in the goldens name the example by its path relative to the repository
root (`loc("examples/ad_gather.kina":7:11)`), so the files do not depend on where
the repository is checked out.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT))
# `--size` values of the generic examples (scripts/storylm_data.py SIZES for StoryLM-0).
SIZES = {"storylm": {"B": 1, "T": 4, "H": 2, "DH": 2, "V": 8}, "storylm0_sample": {"B": 1}}

from compiler import build  # noqa: E402
from compiler.core.diagnostics import SourceText  # noqa: E402


def examples() -> list[Path]:
    """The examples that must compile (and so have a golden)."""
    return sorted(p for p in EXAMPLES.glob("*.kina") if not p.name.startswith("invalid_"))


def golden_path(example: Path) -> Path:
    return example.with_suffix(".mlir")


def emit_example(path: Path) -> tuple[str | None, list[str]]:
    """(MLIR text, []) or (None, rendered diagnostics) for one .kina file."""
    path = Path(path).resolve()
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text()
    result = build.BuildResult(False, source=SourceText(text, rel))
    mlir = build.front_end(text, rel, {}, result, sizes=SIZES.get(path.stem))
    errors = [result.source.render(d) for d in result.diagnostics if d.severity == "error"]
    return (None, errors) if mlir is None or errors else (mlir, [])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="example names (default: all)")
    ap.add_argument("--check", action="store_true", help="report stale goldens instead of writing")
    args = ap.parse_args(argv)
    chosen = [p for p in examples() if not args.names or p.stem in args.names]
    unknown = set(args.names) - {p.stem for p in chosen}
    if unknown:
        print(f"no such example: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    status = 0
    for example in chosen:
        mlir, errors = emit_example(example)
        golden = golden_path(example)
        if mlir is None:
            print(f"FAIL  {example.relative_to(ROOT)} does not compile:\n" + "\n".join(errors), file=sys.stderr)
            status = 1
        elif args.check:
            fresh = golden.exists() and golden.read_text() == mlir
            print(f"{'ok   ' if fresh else 'STALE'} {golden.relative_to(ROOT)}")
            status |= not fresh
        else:
            changed = not golden.exists() or golden.read_text() != mlir
            golden.write_text(mlir)
            print(f"{'wrote' if changed else 'same '} {golden.relative_to(ROOT)} ({len(mlir.splitlines())} lines)")
    return status


if __name__ == "__main__":
    sys.exit(main())
