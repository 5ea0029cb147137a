"""kina-lsp: the Kina language server (pygls), over stdio or --tcp.
Entry points: kina_lsp.server:main (the `kina-lsp` command), `python -m kina_lsp`.

It reuses the compiler's incremental front end (compiler.analysis) for every
answer; the feature modules only translate between compiler objects and LSP.

The core (this package's top level): the server, its state and the wire.

  server.py       the KinaServer class, commands and custom requests, main; calls every
                  handler module's register(server, safe) (server.REGISTERED)
  lifecycle.py    initialize, settings, document sync, pulled diagnostics (registered by server.py)
  handlers.py     hover, inlay hints, navigation, rename, symbols, completion, signature
                  help: the requests about a position (registered by server.py)
  cli.py          the kina-lsp command (stdio, --tcp), neutral working directory
  __main__.py     `python -m kina_lsp`, with the working directory dropped from sys.path
  base.py         what features need of the server: base.Server (a Protocol), safe / Safe
  transport.py    frames and JSON-RPC checks: every request gets an answer
  protocol.py     LSP line breaks in documents; cancellation reaches the work
  tcp.py          --tcp: loopback only, token required
  documents.py    the server's state and its lifecycle: per-document analysis, request budget
  core/diagnostics.py  push (debounced, stale results dropped) or pull (textDocument/diagnostic)
  settings.py     the client's settings (initializationOptions, workspace/configuration)
  convert.py      Span (code points) <-> Range (UTF-16)
  background.py   whole-document work on a worker thread, dropped once the document changes
  items.py        the item split, incremental (an edit re-splits one item)

The features (kina_lsp/features/, one module per LSP feature; listed in its __init__.py):

  hover.py        types, op rules, signatures, reverseMode result tuples
  inlay.py        the type of every let binding
  navigation.py   definition, references, rename, document symbols
  completion.py   completion and signature help
  semantic.py     semantic tokens (ops, functions, dtypes, reverseMode): full, range, delta
  folding.py      folding ranges          selection.py  selection ranges
  highlight.py    document highlight      workspace_symbols.py  functions of the workspace
  call_hierarchy.py  incoming/outgoing calls    formatting.py  formatting (compiler.format.formatter)
  lenses.py       code lenses: Build & validate, Gradient check (kina.validateFunction)
  actions.py      quick fix for reverseMode method chains; source actions
  commands.py     kina.buildAndValidate, kina.showMlir / kina/mlir
  astutil.py      (shared helper) read-only queries over the compiler's AST

Imports go one way: server.py imports the features, lifecycle.py and handlers.py (to
register their handlers) and the core; a feature imports the core, base.py and other
features, never server.py; lifecycle.py and handlers.py import features and the core (and
name KinaServer only for the type checker); the core below them imports no feature.  cli.py gets the server
from server.main, so it does not import server.py either.  There is no import
cycle, lazy imports included (scripts/check_lsp_cycles.py checks it).
"""
