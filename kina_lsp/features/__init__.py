"""The language features: one module per LSP feature, each translating between the
compiler's objects (compiler.analysis' Snapshot, spans, types) and LSP.

  hover.py              textDocument/hover: types, op rules, signatures, reverseMode result tuples
  inlay.py              textDocument/inlayHint (and resolve): let types, parameter names at calls
  navigation.py         textDocument/definition, declaration, typeDefinition, references, rename, documentSymbol
  completion.py         textDocument/completion and signatureHelp
  semantic.py           textDocument/semanticTokens: full, range, delta (ops, functions, dtypes, reverseMode)
  semantic_lex.py       its lexical half: a text's tokens classified, as LSP rows
  semantic_chunks.py    its cache: tokens per function (ChunkCache), ranges, deltas
  folding.py            textDocument/foldingRange
  selection.py          textDocument/selectionRange
  highlight.py          textDocument/documentHighlight
  workspace_symbols.py  workspace/symbol: the functions of the workspace's .kina files
  call_hierarchy.py     textDocument/prepareCallHierarchy, callHierarchy/incomingCalls, outgoingCalls
  formatting.py         textDocument/formatting and rangeFormatting (compiler.format.formatter)
  lenses.py             textDocument/codeLens: Build & validate, Gradient check (kina.validateFunction)
  actions.py            textDocument/codeAction and codeAction/resolve: quick fixes (reverseMode method
                        chains, literals, casts), the refactors, source actions
  refactor.py           the refactor actions (and refactor_extract, _inline, _shape, _check, _syntax):
                        extract/inline a let, method chain <-> lets, broadcast/reshape fixes,
                        each offered only when the edited text re-checks
  links.py              textDocument/documentLink: paths and URLs in comments
  commands.py           workspace/executeCommand kina.buildAndValidate, kina.showMlir; the kina/mlir request

and one shared helper, not a feature:

  astutil.py            read-only queries over the compiler's AST (node at a cursor, a function's lets)

A feature module imports the core (kina_lsp.documents, kina_lsp.convert, ...), other
feature modules and kina_lsp.base, never kina_lsp.server: it sees the server as
base.Server, and the modules with handlers of their own register them in their
register(server, safe), which server.py calls.  The other features' handlers are in
server.py, thin wrappers around the functions here.
"""
