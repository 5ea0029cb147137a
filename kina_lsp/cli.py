"""The `kina-lsp` command line: stdio by default, `--tcp` for one local client with a token.

Before serving, the server moves into a fresh private working directory (an editor starts
it in the folder it has open, and everything it starts, such as the validator's child
process, would find that folder's own Python files first) and lowers the GIL switch
interval (the analysis thread is CPU-bound; the event loop must not wait 5 ms at every
await).

The server itself is server.py's: its `main` (the `kina-lsp` entry point) hands it to
`run`, so this module never imports server.py.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from types import FrameType
from typing import NoReturn, Protocol

from compiler.core.diagnostics import UsageError

from . import tcp


class Serving(Protocol):
    """What the command needs of the server (server.KinaServer is one)."""
    def start_io(self) -> int: ...

    def start_tcp(self, host: str, port: int, token: str = "",
                  announce: Callable[[int], None] = lambda port: None) -> int: ...

    def stop_work(self) -> None:
        """Cancel the validations and stop the analysis worker (at exit)."""
        ...


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kina-lsp", description="The Kina language server (stdio by default).")
    parser.add_argument("--tcp", action="store_true",
                        help="serve one client over TCP on a loopback address, with a token (see --token-file)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2087, help="TCP port (0: any free port; default 2087)")
    parser.add_argument("--token-file", help="file (mode 0600) holding the token TCP clients must send as "
                                             "initializationOptions.token; without it a token is printed")
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (DEBUG, INFO, ...)")
    return parser


def _serve_tcp(server: Serving, args: argparse.Namespace) -> int:
    host = tcp.check_host(args.host)
    token = tcp.load_token(args.token_file) if args.token_file else tcp.new_token()

    def announce(port: int) -> None:
        shown = "from " + args.token_file if args.token_file else token
        print(f"kina-lsp: listening on {host}:{port}; token: {shown}", file=sys.stderr, flush=True)

    return server.start_tcp(host, args.port, token, announce)


def _neutral_working_directory() -> str:
    """Move into a fresh private directory.  An editor starts the server in the folder it
    has open; everything the server starts (the validator's child process runs
    `python -m compiler.oracle.validate`) would otherwise find that folder's own `compiler/`
    or `numpy.py` first.  Nothing the server does depends on its working directory."""
    path = tempfile.mkdtemp(prefix="kina-lsp-cwd-")
    os.chdir(path)
    return path


def _finish(server: Serving, cwd: str, code: int) -> NoReturn:
    """Every way out ends here: running validations are cancelled (their workers kill
    their child processes), the private directory goes, and the process ends with
    os._exit (worker threads, such as a running validation, must not keep a server
    without a client alive)."""
    server.stop_work()
    sys.stderr.flush()
    shutil.rmtree(cwd, ignore_errors=True)
    os._exit(code)


def _end_on_sigterm(server: Serving, cwd: str) -> None:
    """An editor that gives up on a clean `exit` sends SIGTERM, and so does the watch on
    the client's process (server._watch_parent).  The default action would leave the
    private directory and any validator child behind.  The handler runs in the main
    thread; pygls' own SystemExit path is no use here, as it joins the stdin reader
    thread, which blocks until the client closes our stdin."""
    def handler(signum: int, frame: FrameType | None) -> None:
        _finish(server, cwd, 128 + signum)
    signal.signal(signal.SIGTERM, handler)


def run(server: Serving, argv: list[str] | None = None) -> int:
    """The `kina-lsp` command, serving with `server` (server.main calls it)."""
    args = _parser().parse_args(argv)
    if args.token_file:
        args.token_file = os.path.abspath(args.token_file)   # before leaving the caller's directory
    # SIGTERM waits while the private directory is made and the handler that removes it is
    # installed: one arriving between the two (an editor that quits at once; the process
    # test under load, in CI) took the default action and left the directory behind.
    blocking = hasattr(signal, "pthread_sigmask")
    if blocking:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    cwd = _neutral_working_directory()
    _end_on_sigterm(server, cwd)
    if blocking:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    # The analysis thread is CPU-bound Python: with the default 5 ms switch interval the
    # event loop waits up to 5 ms for the GIL at every await, which adds up in one request.
    sys.setswitchinterval(0.001)
    # Everything imported so far (lark's grammar tables, lsprotocol's converters, numpy)
    # lives as long as the server: frozen, a full collection no longer walks those ~70,000
    # objects, which took 60-90 ms and showed up as the slowest request of an edit burst.
    gc.collect()
    gc.freeze()
    level = logging.getLevelName(args.log_level.upper())
    logging.basicConfig(stream=sys.stderr, level=level if isinstance(level, int) else logging.WARNING,
                        format="kina-lsp %(levelname)s %(name)s: %(message)s")
    code = 1
    try:
        code = _serve_tcp(server, args) if args.tcp else server.start_io()
    except UsageError as e:
        print(f"kina-lsp: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    finally:
        _finish(server, cwd, code)
