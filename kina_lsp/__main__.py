"""`python -m kina_lsp` runs the language server over stdio."""
from .server import main

raise SystemExit(main())
