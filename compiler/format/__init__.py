"""`kinac fmt`: Kina source -> the same program in the one Kina style.

Takes source text (parsed with compiler.syntax); gives formatted text with every comment
woven back in by position, laid out within 100 columns; a text that does not parse is a
FormatError (the formatter never changes what a program means: the result parses to the
same AST, which it checks).

Public entry points (other packages import only these):
  format_source(text, width=100) -> str;  FormatError

Inside: formatter (the driver: parse, print, check the result), print_types and
print_expr (the AST printer: signatures and types, then bodies), imports (the import
header), comments (the comment-aware emitter), layout (the line-breaking engine),
errors (FormatError).
"""
from compiler.format.formatter import FormatError, format_source

__all__ = ["FormatError", "format_source"]
