"""The upstream MLIR Python bindings (xtc-mlir-python-bindings): loading them on first use,
checking they are installed without loading them, their errors as diagnostics text,
`walk_ops`, the one walk over a module every Python rewrite uses, and the small readings of
IR those rewrites share (`view_root`, `const_index`).

In a process of its own (the -O2 worker, compiler/backend/worker_main.py) `engine_module`
loads them; the parent only asks `require_bindings` (the language server never loads MLIR).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compiler.backend.errors import INLINE_LOC_RE, ToolchainError

if TYPE_CHECKING:
    from types import ModuleType

    from mlir.ir import Module, OpView, WalkResult


_BINDINGS = "pip install xtc-mlir-python-bindings==22.1.8.4"


def engine_module() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The upstream `mlir` Python bindings (imported on first use: ~0.1 s)."""
    try:
        from mlir import execution_engine, passmanager
        from mlir import ir as mlir_ir
    except ImportError as e:
        raise ToolchainError(f"-O1..-O3 compile in-process with the MLIR Python bindings, which are not "
                             f"importable ({e}); install them with `{_BINDINGS}`") from None
    return mlir_ir, passmanager, execution_engine


def require_bindings() -> None:
    """Raise ToolchainError when the MLIR Python bindings are not installed, without
    loading them into this process (the back end runs in a worker process)."""
    import importlib.util
    try:
        found = importlib.util.find_spec("mlir.execution_engine") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ToolchainError(f"-O1..-O3 compile with the MLIR Python bindings, which are not installed; "
                             f"install them with `{_BINDINGS}`")


def mlir_error_text(err: Exception) -> str:
    """An MLIRError as `loc: error: message` lines, the format tool_diagnostics reads."""
    diags = getattr(err, "error_diagnostics", None) or []
    lines = []
    for d in diags:
        loc = str(d.location)
        m = INLINE_LOC_RE.search(loc) or re.search(r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)', loc)
        where = f"{m['file']}:{m['line']}:{m['col']}" if m else loc
        lines.append(f"{where}: error: {d.message}")
        lines += [f"  note: {n.message}" for n in d.notes][:2]
    return "\n".join(lines) or str(err)


def walk_ops(mlir_ir: ModuleType, module: Module, pick: Callable[[OpView], bool]) -> list[OpView]:
    """Every op of the module `pick` accepts, in walk order (collected first: callers rewrite them)."""
    found: list[Any] = []

    def visit(op: OpView) -> WalkResult:
        if pick(op):
            found.append(op)
        return mlir_ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def view_root(value: Any, views: tuple[str, ...] = ("memref.subview",)) -> Any:
    """The buffer a chain of view ops (`views`, each viewing its operand 0) starts from:
    `value` itself when no such op makes it."""
    while getattr(value.owner, "name", None) in views:   # a block argument's owner is its block
        value = value.owner.operands[0]
    return value


def const_index(mlir_ir: ModuleType, value: Any) -> int | None:
    """The value of an index or integer `arith.constant`; None for anything else."""
    owner = value.owner
    if getattr(owner, "name", None) != "arith.constant":
        return None
    attr = owner.attributes["value"]
    return mlir_ir.IntegerAttr(attr).value if isinstance(attr, mlir_ir.IntegerAttr) else None
