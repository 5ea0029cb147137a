"""Stage 1, syntax: Kina source text -> AST with character-offset spans, and syntax diagnostics.

Takes text, gives `nodes.Module` (frozen dataclasses; every node has a Span) plus the
`syntax` diagnostics of every broken item.  It never raises on bad input: a broken item is
re-parsed in recovery mode and reported whole, and the others still parse.

Public modules and entry points (other packages import only these):
  parse   parse_module(text) -> (nodes.Module, diagnostics); parse_item(text, offset);
          parse_local(text): one item, cached per item text (the incremental front end)
  nodes   the AST node classes (FnDef, Let, MethodCall, TensorTypeExpr, ...)
  lex     tokens(text, ...): the terminals of grammar.lark; KEYWORDS, word_at (the one
          lexer: recovery, completion, semantic tokens, folding and rename use it)
  items   split_items(text) -> top-level items by a brace scan; gaps(text, items)
  imports scan(text, items) -> the import lines (ImportDecl) opening a file; qualify(fn, names):
          `layers.linear(x)` as a Call of "layers.linear"; module_of
  walk    children(node) for iterative walks; shift(node, delta) moves every Span; rebuild(node, f)
  hints   NumPy / PyTorch names that are not Kina ops and how Kina spells them (the
          checker's notes; syntax errors use RETURN_MESSAGE)

Inside: grammar (grammar.lark's Lark, its tables from lark's cache in a private per-user
directory), builder (grammar.lark's LALR parser with the AST builder embedded), errors (a
lark error -> one diagnostic in words), recovery (every error of a broken item).
"""
__all__ = ["hints", "imports", "items", "lex", "nodes", "parse", "walk"]
