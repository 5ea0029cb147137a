"""The vocabulary every stage shares; it imports no other part of Kina.

Takes nothing, gives the types and the diagnostics that the parser, the checker, the IR,
the back end, the runtime and the language server all speak.

Public modules (other packages import these):
  types        DType (one row per dtype: MLIR name, NumPy dtype, tolerances), TensorType,
               TupleType, Type, Attrs, FLOAT_DTYPES, PLACEMENTS
  diagnostics  Span (character offsets), Diagnostic (code, message, span, notes, fix),
               DiagnosticBag (collects them), CODES (every diagnostic code), SourceText
               (offsets -> line:col, the CLI's rendering), UsageError, read_source (drops a
               leading BOM), BOM, display_path (a file name as printed, escaped),
               plain_name (a file name for generated MLIR / C text)
  sizes        Size (a symbolic dimension: a polynomial over size parameters, canonical),
               Dim (int | Size), Undecidable, nonnegative, exact_div, subst
  progress     Ticker: a one-line progress indicator on a terminal for commands that take
               over 2 s (`kinac build`, `kinac validate`)
  stdlib       STD_DIR (the standard library's folder), std_modules() (its module names)
"""
__all__ = ["diagnostics", "progress", "sizes", "stdlib", "types"]
