"""Packed entry points: for every exported `_mlir_ciface_kina_f` of a lowered module, a
`_kina_packed_kina_f(void **args)` that reads the descriptor pointers from one array, so
the Python runtime makes a one-argument ctypes call (both back ends add them).
"""
from __future__ import annotations

import re

CIFACE_PREFIX = "_mlir_ciface_"
PACKED_PREFIX = "_kina_packed_"
_CIFACE_RE = re.compile(r"llvm\.func @(" + CIFACE_PREFIX + r"kina_[\w.$]*)\(([^)]*)\)")


def packed_symbol(ciface_symbol: str) -> str:
    """`_mlir_ciface_kina_f` -> `_kina_packed_kina_f` (the runtime derives it the same way)."""
    return PACKED_PREFIX + ciface_symbol[len(CIFACE_PREFIX):]


def packed_entry_point(ciface_symbol: str, n_args: int, declare: bool = False) -> str:
    """LLVM-dialect text of `void packed(void **a) { ciface(a[0], ..., a[n-1]); }`."""
    ptrs = ", ".join(["!llvm.ptr"] * n_args)
    lines = [f"llvm.func @{ciface_symbol}({ptrs})"] if declare else []
    lines.append(f"llvm.func @{packed_symbol(ciface_symbol)}(%args: !llvm.ptr) {{")
    for i in range(n_args):
        lines.append(f"  %p{i} = llvm.getelementptr %args[{i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr")
        lines.append(f"  %a{i} = llvm.load %p{i} : !llvm.ptr -> !llvm.ptr")
    args = ", ".join(f"%a{i}" for i in range(n_args))
    lines += [f"  llvm.call @{ciface_symbol}({args}) : ({ptrs}) -> ()", "  llvm.return", "}"]
    return "\n".join(lines)


def add_packed_entry_points(llvm_mlir_text: str) -> str:
    """Append a packed entry point per exported function to a lowered (LLVM dialect) module."""
    wrappers = [packed_entry_point(m[1], m[2].count("!llvm.ptr"))
                for m in _CIFACE_RE.finditer(llvm_mlir_text)]
    body = llvm_mlir_text.rstrip()
    if not wrappers or not body.endswith("}"):
        return llvm_mlir_text
    return body[:-1] + "\n".join(wrappers) + "\n}\n"
