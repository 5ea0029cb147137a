"""The pass list of the "tools" back end (-O0) through mlir-opt processes, with the rewrites of
compiler/backend/rewrites.py at their slots: `run_passes` (the lowered module's text),
`rewrite_text` (one slot's rewrite in a worker process) and `slot_needed` (whether a slot's
rewrite may change the module).  compiler/backend/toolchain.py calls it; the in-process
back end of -O1..-O3 runs the same slots in compiler/backend/engine.py.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from compiler.backend import worker as backend_worker
from compiler.backend.math_lowering import lower_math_text
from compiler.backend.pipelines import MLIR_OPT_FLAGS, segments
from compiler.backend.rewrites import SLOTS
from compiler.backend.tools import run_tool, run_tool_until


def run_passes(mlir_text: str, passes: list[str], tmp: Path, timings: dict[str, float]) -> str:
    """The pass list through mlir-opt, with the rewrite of each slot (compiler/backend/rewrites.py)
    between its segments; returns the MLIR text.  f32 exp is first written as -O2's polynomial
    (compiler/backend/math_lowering.py), not left to libm's expf: the compiled exp has the same
    bits at every level.

    The segments run in one process (`_run_from`) that prints the module at each slot the
    emitted text may need and is stopped at the first slot that the printed module needs;
    the next process starts from that module with the slot's rewrite.  A process per segment
    re-parsed and re-printed the module each time: the GPT block's -O0 lowering took 1.17 s
    of CPU in four processes, 0.75 s in one, with the same output.  A slot whose need shows
    in the output (_SHOWN) is not tested when the emitted text makes that need unlikely;
    if the output shows it after all, the module is lowered again with the test."""
    text, _ = lower_math_text(mlir_text)
    skip = _skipped_slots(mlir_text, passes)
    lowered = _run_segments(text, passes, mlir_text, tmp, timings, skip)
    if any(_SHOWN[slot](lowered) for slot in skip):   # a skipped slot was needed after all
        lowered = _run_segments(text, passes, mlir_text, tmp, timings, frozenset())
    return lowered


# A slot whose need shows in the lowered module when the slot is skipped: "@lower-copies" (a
# strided memref.copy it would have made loops becomes a call of the runner library's
# `memrefCopy`).  Printing the module at that slot to test it took 0.02-0.025 s of the 0.25 s
# mlir-opt spends on the GPT block's gradient (the IR printer, not the test): a module whose
# emitted text makes no strided view is lowered without that print, and lowered again with it
# only when the output shows the slot was needed (never a wrong library: at worst a second run).
_SHOWN: dict[str, Callable[[str], bool]] = {"@lower-copies": lambda lowered: "@memrefCopy" in lowered}
# The emitted ops whose buffers can be strided views (slices, a scan's rows, padding): a module
# with one of them is likely to need "@lower-copies", and is tested at its slot at once.
# (Substrings, not a regular expression: 0.3 instead of 2.7 ms on the GPT block's gradient.)
_VIEW_OPS = ("tensor.extract_slice", "tensor.insert_slice", "tensor.pad", "tensor.concat", "memref.subview",
             "scf.for")


def _skipped_slots(emitted: str, passes: list[str]) -> frozenset[str]:
    """The slots of _SHOWN that `run_passes` first runs without testing (see _SHOWN)."""
    if any(p.startswith("--transform-preload-library") for p in passes) or any(op in emitted for op in _VIEW_OPS):
        return frozenset()
    return frozenset(slot for slot in _SHOWN if slot in passes)


def _run_segments(text: str, passes: list[str], emitted: str, tmp: Path, timings: dict[str, float],
                  skip: frozenset[str]) -> str:
    """run_passes' segments on `text` (the emitted module with its math lowered); the slots
    in `skip` are not tested (nor rewritten)."""
    # A transform script preloaded once stays in the context of one process; each
    # mlir-opt process of a later segment that interprets it ("@outline") loads it again.
    preload = [p for p in passes if p.startswith("--transform-preload-library")]
    segs = segments(passes)
    k = 0
    while k < len(segs):
        slot, part = segs[k]
        if slot is not None:
            t0 = time.perf_counter()
            text = rewrite_text(slot, text, tmp)
            timings["mlir-opt"] = timings.get("mlir-opt", 0.0) + time.perf_counter() - t0
        if not preload:
            text, k = _run_from(text, segs, k, emitted, tmp, timings, skip)
            continue
        if any(p.startswith("--transform-interpreter") for p in part) and not any(p in preload for p in part):
            part = preload + part
        if part:
            src, out = tmp / f"in{k}.mlir", tmp / f"out{k}.mlir"
            src.write_text(text)
            run_tool("mlir-opt", [str(src), *MLIR_OPT_FLAGS, *part, "-o", str(out)], timings, "mlir-opt")
            text = out.read_text()
        k += 1
    return text


# mlir-opt's --mlir-print-ir-after header; with --mlir-print-ir-module-scope the module
# follows, its last line a `}` in the first column.
_DUMP_RE = re.compile(r"^// -----// IR Dump After \S+ \((?P<arg>[^)]*)\)[^\n]*//----- //$")


def _run_from(text: str, segs: list[tuple[str | None, list[str]]], k: int, emitted: str, tmp: Path,
              timings: dict[str, float], skip: frozenset[str] = frozenset()) -> tuple[str, int]:
    """The passes of segs[k:] (segs[k]'s slot already applied to `text`) in one mlir-opt
    process that prints the module after the last pass before each later slot the emitted
    text may need (`Rewrite.maybe`) and that is not in `skip`.  Returns (the output,
    len(segs)), or, as soon as a printed module needs its slot (`slot_needed`, the test the
    slot itself makes), the process is stopped and (that module, the slot's segment) is returned."""
    passes: list[str] = []
    points: dict[tuple[str, int], list[tuple[int, str]]] = {}   # (pass, occurrence) -> [(segment, slot)]
    for j in range(k, len(segs)):
        slot, part = segs[j]
        if j > k and slot is not None and slot not in skip and SLOTS[slot].maybe(emitted):
            if not passes:          # nothing runs before it: its test is on the input
                if slot_needed(slot, text):
                    return text, j
            elif passes[-1].lstrip("-").partition("=")[0].endswith("pipeline"):
                return _run_plain(text, passes, tmp, timings), j   # a pipeline cannot be printed after
            else:
                arg = passes[-1].lstrip("-").partition("=")[0]
                n = sum(p.lstrip("-").partition("=")[0] == arg for p in passes)
                points.setdefault((arg, n), []).append((j, slot))
        passes += part
    if not points:
        return (_run_plain(text, passes, tmp, timings) if passes else text), len(segs)
    watch = _DumpWatch(points)
    src, out = tmp / f"in{k}.mlir", tmp / f"out{k}.mlir"
    src.write_text(text)
    flags = [f"--mlir-print-ir-after={','.join(sorted({a for a, _ in points}))}", "--mlir-print-ir-module-scope"]
    stopped, _ = run_tool_until("mlir-opt", [str(src), *MLIR_OPT_FLAGS, *flags, *passes, "-o", str(out)],
                                timings, "mlir-opt", watch.line)
    if stopped and watch.needed is not None:
        return watch.needed
    return out.read_text(), len(segs)


def _run_plain(text: str, passes: list[str], tmp: Path, timings: dict[str, float]) -> str:
    src, out = tmp / "plain.in.mlir", tmp / "plain.out.mlir"
    src.write_text(text)
    run_tool("mlir-opt", [str(src), *MLIR_OPT_FLAGS, *passes, "-o", str(out)], timings, "mlir-opt")
    return out.read_text()


class _DumpWatch:
    """Reads mlir-opt's stderr line by line: collects each printed module and, at its last
    line, says stop when a slot printed there needs it (`needed` is then (module, segment))."""

    def __init__(self, points: dict[tuple[str, int], list[tuple[int, str]]]) -> None:
        self.points = points
        self.seen: dict[str, int] = {}
        self.current: tuple[str, int] | None = None
        self.lines: list[str] = []
        self.needed: tuple[str, int] | None = None

    def line(self, line: str) -> bool:
        head = _DUMP_RE.match(line.rstrip("\n"))
        if head:
            self.seen[head["arg"]] = self.seen.get(head["arg"], 0) + 1
            self.current, self.lines = (head["arg"], self.seen[head["arg"]]), []
            return False
        if self.current is None:
            return False
        self.lines.append(line)
        if line.rstrip("\n") != "}":
            return False
        module = "".join(self.lines)
        for j, slot in self.points.get(self.current, []):
            if slot_needed(slot, module):
                self.needed = (module, j)
                return True
        self.current, self.lines = None, []
        return False


# A sharper text test than a slot's own `needed`, where a wrong "needed" costs a worker
# process (Python and the MLIR bindings: 0.3 s of CPU, more than an 8 KB module's whole
# lowering): "@lower-copies" rewrites only copies between buffers that are not both
# contiguous, and a copy whose two types are static with the identity layout is not one.
_COPY_RE = re.compile(r"^\s*memref\.copy [^:\n]*:(?P<types>[^\n]*)$", re.M)


def _strided_copy(text: str) -> bool:
    """Whether some memref.copy of the text may not be between contiguous buffers: a type
    with a layout (strided<..>, a #map alias) or a dynamic size; any copy this test cannot
    read (not in the custom form) counts as one."""
    copies = list(_COPY_RE.finditer(text))
    if len(copies) != text.count("memref.copy"):
        return True
    return any(mark in m["types"] for m in copies for mark in ("strided", "#", "?", "affine_map"))


_SHARPER: dict[str, Callable[[str], bool]] = {"@lower-copies": _strided_copy}


def slot_needed(slot: str, text: str) -> bool:
    """SLOTS[slot].needed, sharpened where _SHARPER has a test."""
    sharper = _SHARPER.get(slot)
    return SLOTS[slot].needed(text) and (sharper is None or sharper(text))


def rewrite_text(slot: str, mlir_text: str, work_dir: str | os.PathLike[str]) -> str:
    """SLOTS[slot] on MLIR text in a worker process, when the text says it may be needed."""
    if not slot_needed(slot, mlir_text):
        return mlir_text
    path = Path(work_dir) / "rewrite.mlir"
    path.write_text(mlir_text)
    backend_worker.run({"mode": "rewrite", "slot": slot, "input": str(path)}, Path(work_dir))
    return path.read_text()
