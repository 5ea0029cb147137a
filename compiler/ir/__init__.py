"""The typed IR and the op table: what the checker produces and every later stage reads.

Takes nothing from the stages above it (only compiler.core); gives the IR's node classes,
the table of built-in ops with their typing rules, the verifier that re-types a program
between stages, a printer, and the value-flow facts of parameters.

Public modules (other packages import only these):
  nodes        Program, Function, Param, Binding, Var, OpApp, CallFn, Handle, Literal,
               MakeTuple (frozen; every node typed, with a Span); HANDLERS (the effect
               handlers the language has); is_export (user functions, not
               generated `f.rev` or instantiations `linear$8_4`); walk / children
  ops          OPS: one OpDef row per op (shape rule, typing rule and doc line, operand
               count, attributes, the facts other stages read: float_only, index_operands,
               layout, index_bound, positive, internal); SURFACE_OPS, INFIX;
               check_float_only (the rule the checker and the verifier share)
  shape_rules  the infer_* functions the rows use; OpError; require_float
  random_rules the random ops' typing rules and the constants of their generator
               (Threefry-2x32 rotations, erfinv coefficients) that the interpreter
               and the lowering share
  verify       verify(program, stage) -> diagnostics: every node re-typed by its rule
  printer      format_function / format_program (`kinac check --emit=grad`)
  uses         Uses(program).index_bound / .positive: where a parameter's values go
  sizes        subst_function / subst_expr (size values into a dynamic function), free_sizes

Adding an op starts here: its row in ir/ops.py (docs/internals.md, "Adding an op").
"""
__all__ = ["nodes", "ops", "printer", "random_rules", "shape_rules", "sizes", "uses", "verify"]
