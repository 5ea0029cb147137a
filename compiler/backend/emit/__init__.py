"""MLIR emission: typed IR (handles already lowered) -> MLIR text (func, linalg, tensor, arith,
math, cf), one `func.func @kina_f` per Kina function with llvm.emit_c_interface.

Public entry points:
  emit_program(program, source) -> EmitResult(text, diagnostics): text is "" when there is
                a diagnostic (@device operands, a failing lowering row), never a traceback
  LOWERINGS     op name -> emitter, one row per op of compiler.ir.ops.OPS

Inside: program (functions, literals, results), builder (FnEmitter: element and tensor
types, fresh SSA names, the shared pieces of the rows), ops and ops_ext (the rows).
"""
from compiler.backend.emit.ops import ATTR_CHOICES, LOWERINGS
from compiler.backend.emit.program import EmitResult, emit_program

__all__ = ["ATTR_CHOICES", "LOWERINGS", "EmitResult", "emit_program"]
