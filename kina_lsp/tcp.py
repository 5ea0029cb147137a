"""`kina-lsp --tcp`: one editor of this user, over a loopback socket, with a token.

A TCP port is open to every local user and, bound to anything but loopback, to
the network; the server answers Build & validate (which compiles and runs
code) and reads what its clients send.  So TCP mode

- binds to a loopback address only (`--host` must be 127.0.0.1, ::1 or
  localhost);
- requires a token: the client sends it as `initializationOptions.token` in its
  `initialize` request.  The token is read from `--token-file` (which must be a
  file of this user that nobody else can read or write: mode 0600) or, without
  one, made up at start and printed on stderr;
- gives an unauthenticated connection nothing: requests get -32002, the
  initialize with a wrong token gets -32600 and the connection is closed, and a
  connection that does not authenticate within AUTH_TIMEOUT seconds is dropped.
  Failed attempts never stop the server;
- serves one client: the first that authenticates.  When it disconnects (or
  sends `exit`), the server exits, as over stdio.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from pygls.protocol import JsonRPCProtocol

from compiler.core.diagnostics import UsageError

from .transport import Dispatcher, StreamSource, serve

log = logging.getLogger(__name__)

AUTH_TIMEOUT = 10.0
MIN_TOKEN = 16


def check_host(host: str) -> str:
    """The host to bind, which must be a loopback address."""
    addr = "127.0.0.1" if host == "localhost" else host
    try:
        ok = ipaddress.ip_address(addr).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(f"--host {host}: kina-lsp listens on a loopback address only "
                         "(127.0.0.1, ::1 or localhost); use stdio or an SSH tunnel for anything else")
    return addr


def load_token(path: str) -> str:
    """The token in `path`, refusing a file that other users could read or replace."""
    try:
        info = os.stat(path)
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--token-file {path}: cannot read it ({e})") from None
    if os.name == "posix":
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"--token-file {path}: not a regular file")
        if info.st_uid != os.getuid():
            raise UsageError(f"--token-file {path}: owned by another user")
        if info.st_mode & 0o077:
            raise UsageError(f"--token-file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users "
                             f"read or change it; run `chmod 600 {path}`")
    if len(text) < MIN_TOKEN:
        raise UsageError(f"--token-file {path}: the token must have at least {MIN_TOKEN} characters")
    return text


def new_token() -> str:
    return secrets.token_urlsafe(32)


class _Gate:
    """Authenticates initialize requests and hands the protocol to the first client that passes."""

    def __init__(self, protocol: JsonRPCProtocol, token: str) -> None:
        self.protocol, self.token = protocol, token.encode("utf-8")
        self.session: Dispatcher | None = None

    def check(self, dispatcher: Dispatcher, writer: asyncio.StreamWriter, params: object) -> str | None:
        opts = params.get("initializationOptions") if isinstance(params, dict) else None
        given = opts.get("token") if isinstance(opts, dict) else None
        if not (isinstance(given, str) and hmac.compare_digest(given.encode("utf-8"), self.token)):
            log.warning("refused a TCP client without the right token")
            return ("kina-lsp over TCP needs its token in initializationOptions.token (the token printed "
                    "when the server started, or the one in its --token-file)")
        if self.session is not None and self.session is not dispatcher:
            return "kina-lsp already has a client"
        self.session = dispatcher
        self.protocol.set_writer(writer)   # from now on pygls answers on this connection
        return None


async def serve_tcp(protocol: JsonRPCProtocol, host: str, port: int, token: str,
                    announce: Callable[[int], None]) -> int:
    """Listen until the authenticated client's session ends; returns the exit code.
    announce(port) is called once the socket listens."""
    gate = _Gate(protocol, token)
    finished: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dispatcher = Dispatcher(protocol, writer.write)
        dispatcher.authenticate = lambda params: gate.check(dispatcher, writer, params)
        timer = asyncio.get_running_loop().call_later(
            AUTH_TIMEOUT, lambda: None if dispatcher.initialized else writer.close())
        try:
            code = await serve(StreamSource(reader), dispatcher)
        finally:
            timer.cancel()
            writer.close()
        if gate.session is dispatcher and not finished.done():
            finished.set_result(code)

    listener = await asyncio.start_server(on_connection, host, port)
    announce(listener.sockets[0].getsockname()[1])
    async with listener:
        return await finished
