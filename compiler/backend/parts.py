"""A library built in parts: the modules compiler/backend/split.py cuts from one emitted
module, each compiled on its own core by the level's back end (the -O0 tools or the -O2
engine), and the entry module (compiler/backend/entry_points.py `entry_module_text`) beside
them; `cc -r` joins their objects into the one object the toolchain links.

The parts cost nothing in the library's code: after `--inline` every exported function
stands alone, and each part holds whole exported functions with everything they call.
What the parts share lives in the entry module: the error slot and its one `_kina_fail`
(which the parts' failed bounds checks call), the ABI text, the checked and packed entries.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.backend.engine import engine_object_in_child
from compiler.backend.entry_points import add_part_runtime, entry_module_text, exported_functions
from compiler.backend.errors import StageFailed
from compiler.backend.llvm_stage import DialectTools, llvm_dialect_object
from compiler.backend.mlir_opt import run_passes
from compiler.backend.pipelines import passes_for, pipeline_for
from compiler.backend.tools import run_tool
from compiler.backend.worker import externals_path

if TYPE_CHECKING:
    from compiler.backend.worker import Worker

Exported = list[tuple[str, int]]


def parts_object(parts: list[str], mlir_text: str, opt_level: int, tmp: Path, obj: Path,
                 timings: dict[str, float], worker: Worker | None = None, objects: Path | None = None) -> None:
    """Compile `parts` (modules cut from `mlir_text`, the emitted module) side by side and
    join them and the entry module into `obj`.  `worker`: an -O2 worker started ahead (it
    takes the first part, the heaviest); `objects`: the build cache's root, for the -O2
    LLVM stage's objects (compiler/backend/llvm_stage.py).  timings get each stage's longest time over the
    parts (the critical path) and the join's."""
    # One thread per part (each part's stages are processes: no GIL held), the heaviest part,
    # the critical path, first.  The entry module waits in the pool's queue for the first
    # thread a lighter part leaves: started beside the parts, its tools made three processes
    # on two cores and slowed the heaviest part (the GPT block's edit rebuild at -O0).
    with ThreadPoolExecutor(len(parts)) as pool:
        futures = [pool.submit(_part_object, text, opt_level, tmp / f"part{k}", worker if k == 0 else None, objects)
                   for k, text in enumerate(parts)]
        entry = pool.submit(_entry_object, mlir_text, tmp / "entry")
        done = [f.result() for f in futures]
        entry_obj, expected = entry.result()
    _merge_externals([tmp / f"part{k}" for k in range(len(parts))], tmp)
    lowered = sorted(e for _, exported, _ in done for e in exported)
    if lowered != sorted(expected):
        raise StageFailed("mlir-opt", f"the parts of the module export {lowered}, but the emitted module "
                                      f"declares {sorted(expected)} (a compiler bug, please report it)")
    for stage in dict.fromkeys(s for _, _, spent in done for s in spent):   # in the stages' order
        timings[stage] = timings.get(stage, 0.0) + max(spent.get(stage, 0.0) for _, _, spent in done)
    run_tool("cc", ["-r", "-nostdlib", "-o", str(obj), *(str(o) for o, _, _ in done), str(entry_obj)], timings, "cc")


def _part_object(text: str, opt_level: int, work: Path, worker: Worker | None,
                 objects: Path | None) -> tuple[Path, Exported, dict[str, float]]:
    """One part's object (in `work`), the functions it exports and its stages' seconds."""
    work.mkdir()
    spent: dict[str, float] = {}
    pipeline = pipeline_for(opt_level)
    passes = passes_for(text, opt_level, work)
    obj = work / "out.o"
    if pipeline.backend == "engine":
        exported = engine_object_in_child(text, passes, pipeline.llvm_level, obj, spent, worker, part=True,
                                          objects=objects)
    else:
        with DialectTools(obj, pipeline.llvm_level) as tools:   # started now: their start-up overlaps mlir-opt
            lowered = run_passes(text, passes, work, spent)
            exported = exported_functions(lowered)
            tools.finish(add_part_runtime(lowered), spent)
    return obj, exported, spent


def _entry_object(mlir_text: str, work: Path) -> tuple[Path, Exported]:
    """The object of the entry module of `mlir_text` (tiny: llc -O0 is as good as any), and
    the functions it expects the parts to export."""
    work.mkdir()
    obj = work / "entry.o"
    text, expected = entry_module_text(mlir_text)
    llvm_dialect_object(text, obj, 0, {})   # its seconds count in no stage: the parts' are the critical path
    return obj, expected


def _merge_externals(works: list[Path], into: Path) -> None:
    """The parts' records of which function calls which external symbol, as one (for the
    link's error message when a symbol is missing: compiler/backend/worker.py)."""
    merged: dict[str, list[str]] = {}
    for work in works:
        path = externals_path(work)
        if path.exists():
            for symbol, callers in json.loads(path.read_text()).items():
                merged.setdefault(symbol, []).extend(c for c in callers if c not in merged.get(symbol, []))
    if merged:
        externals_path(into).write_text(json.dumps(merged))
