"""The -O2 back end's worker process: the side of compiler/backend/worker.py that runs in the
child.  It loads the MLIR bindings, reads one request and runs it: the in-process pipeline
(`engine`: compiler/backend/engine.py, MLIR -> object file) or one Python rewrite slot
(`rewrite`: compiler/backend/rewrites.py SLOTS), and writes REQUEST.result.json.

    python -m compiler.backend.worker_main REQUEST.json
    python -m compiler.backend.worker_main --serve      (REQUEST.json's path on stdin)

An MLIR or LLVM abort kills this process only; the parent (worker.py) reports it.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.backend import cache
from compiler.backend.bindings import engine_module
from compiler.backend.engine import engine_object
from compiler.backend.errors import StageFailed
from compiler.backend.rewrites import SLOTS
from compiler.backend.worker import FAULT_ENV, SERVE

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module


def _externals(mlir_ir: ModuleType, module: Module) -> dict[str, list[str]]:
    """External symbol -> the Kina functions (kina_f -> f) whose lowered body calls it."""
    declared = {mlir_ir.StringAttr(op.attributes["sym_name"]).value for op in module.body.operations
                if op.operation.name == "llvm.func" and len(op.regions[0].blocks) == 0}
    out: dict[str, list[str]] = {}
    for op in module.body.operations:
        if op.operation.name != "llvm.func" or len(op.regions[0].blocks) == 0:
            continue
        name = mlir_ir.StringAttr(op.attributes["sym_name"]).value
        kina = name.split("kina_", 1)[1].split(".")[0] if "kina_" in name else name
        # use_local_scope: str(op) prints with the whole module's state (it walks the
        # module per function: 0.4 s of the scaled StoryLM's build); this prints the op alone.
        text = op.operation.get_asm(use_local_scope=True, assume_verified=True)
        for callee in re.findall(r"llvm\.call @([\w.$]+)", text):
            if callee in declared and kina not in out.setdefault(callee, []):
                out[callee].append(kina)
    return out


def _engine(req: dict[str, Any], req_path: Path) -> dict[str, Any]:
    timings: dict[str, float] = {}

    def on_phase(phase: str, mlir_ir: ModuleType, module: Module | None) -> None:
        req_path.with_suffix(".phase").write_text(phase)
        if os.environ.get(FAULT_ENV) == phase:
            print(f"{FAULT_ENV}={phase}: aborting on purpose", file=sys.stderr, flush=True)
            os.abort()
        if phase == "llvm" and module is not None:
            req_path.with_suffix(".externals.json").write_text(json.dumps(_externals(mlir_ir, module)))

    exported = engine_object(Path(req["input"]).read_text(), req["passes"], req["llvm_level"], Path(req["obj"]),
                             timings, on_phase=on_phase, llvm_ir=Path(req["llvm_ir"]) if req.get("llvm_ir") else None,
                             part=bool(req.get("part")), objects=Path(req["objects"]) if req.get("objects") else None)
    return {"ok": True, "timings": timings, "exported": exported}


def rewrite_in_process(slot: str, mlir_text: str) -> str:
    """SLOTS[slot] on MLIR text, in this process (the worker's side)."""
    mlir_ir, _, _ = engine_module()
    with mlir_ir.Context():
        module = mlir_ir.Module.parse(mlir_text)
        if not SLOTS[slot].run(mlir_ir, module):
            return mlir_text
        return str(module.operation.get_asm(enable_debug_info=True))


def _rewrite(req: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    path = Path(req["input"])
    path.write_text(rewrite_in_process(req["slot"], path.read_text()))
    return {"ok": True, "timings": {"rewrite": time.perf_counter() - t0}}


def _serve() -> str:
    """The worker started ahead: load the bindings, then wait for the request's path
    (an empty line or a closed stdin: nothing to do)."""
    try:
        engine_module()
        # What every request imports first (0.08 + 0.02 s): the linalg and llvm dialects'
        # Python modules (wrapping a linalg op imports linalg's; the translation, llvm's).
        import mlir.dialects.linalg
        import mlir.dialects.llvm  # noqa: F401
    except Exception:   # missing bindings: the request reports it (ToolchainError in the parent first)
        pass
    # And what the LLVM stage's object keys read (0.015 s, cached per process): the wheels'
    # versions and the tools' identities.
    try:
        cache.object_salt()
    except Exception:   # (the request meets it again, and reports it)
        pass
    return sys.stdin.readline().strip()


def main(argv: list[str]) -> int:
    if argv and argv[0] == SERVE:
        argv = [_serve()]
        if not argv[0]:
            return 0
    req_path = Path(argv[0])
    req = json.loads(req_path.read_text())
    try:
        result = _engine(req, req_path) if req["mode"] == "engine" else _rewrite(req)
    except StageFailed as e:
        result = {"ok": False, "tool": e.tool, "message": e.stderr}
    except Exception as e:   # a bug in the back end's Python code: reported, not a traceback
        # An exception inside an MLIR walk callback arrives wrapped with its traceback:
        # its last line is the exception itself.
        text = str(e).strip().splitlines()[-1] if "Traceback" in str(e) else f"{type(e).__name__}: {e}"
        result = {"ok": False, "tool": "kinac", "message": f"internal error in the -O2 back end: {text}"}
    req_path.with_suffix(".result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # The result is written: skip the interpreter's teardown, which frees the MLIR context
    # and every loaded module one by one (0.07-0.13 s after the scaled StoryLM's build,
    # time the parent spends waiting for this process to end).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
