"""Kina compiler core.

The pipeline, one module per stage (read them in this order):

  parse      text -> AST (syntax.py) with character-offset spans        [grammar.lark]
  check      AST -> typed IR (ir.py); shape/type rules from ops.py       [diagnostics]
  autodiff   typed IR -> typed IR: `handle f(..) with reverseMode` replaced by a call of
             a generated function computing (R, g0, .., gk-1)            [VJP table]
  interp     NumPy reference interpreter of the typed IR (the oracle)    [NumPy table]
  emit_mlir  typed IR -> MLIR text (func/linalg/tensor/arith/math/cf)     [lowering table]
  toolchain  MLIR text -> .so through mlir-opt / mlir-translate / llc / cc
  runtime    load a .so + manifest, call functions with NumPy arrays
  validate   compiled library vs. interpreter vs. finite differences

analysis.py is the incremental front end (parse + check per function) shared by
the CLI (cli.py) and the language server (kina_lsp/).
"""
