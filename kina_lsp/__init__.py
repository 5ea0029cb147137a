"""kina-lsp: the Kina language server.  Entry point: kina_lsp.server:main."""
