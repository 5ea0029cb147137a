"""`python -m kina_lsp` runs the language server over stdio.

`-m` puts the working directory first on sys.path, and an editor starts the
server in the folder it has open: that folder's own `compiler/`, `numpy.py`,
`lsprotocol/` or `pygls/` would then be imported instead of ours and run.  The
extension prevents it at launch (PYTHONSAFEPATH=1 and a neutral working
directory; a folder's own `kina_lsp/` can only be stopped there), and this
entry drops the working directory from sys.path before anything else is
imported, for whoever starts the server another way.  The one exception is a
Kina checkout that is not installed: there the working directory is where this
package itself came from.
"""
import os
import sys


def _drop_working_directory() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.getcwd()

    def unsafe(entry: str) -> bool:
        path = os.path.abspath(entry or cwd)
        return path == cwd and path != here

    sys.path[:] = [p for p in sys.path if not unsafe(p)]


_drop_working_directory()

from kina_lsp.server import main  # noqa: E402  (after the sys.path clean-up, on purpose)

raise SystemExit(main())
