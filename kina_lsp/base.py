"""What the feature modules (kina_lsp/features/) need from the server, without importing it.

The server (server.py) imports every feature module and registers its handlers; a feature
module never imports server.py, not even lazily.  What a feature needs of the server is here:

- `Server`: the part of server.KinaServer (a pygls LanguageServer) that features use, as a
  Protocol: the analysis of a document (`view`), its buffer, the settings and documents
  state, and the pygls calls the features make (register a handler, show/log a message,
  progress);
- `safe` (and its type `Safe`): the wrapper of every handler, which logs an exception and
  answers a default instead.
"""
from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from pygls.exceptions import JsonRpcException

if TYPE_CHECKING:
    from lsprotocol import types as lsp
    from pygls.progress import Progress
    from pygls.workspace import Workspace

    from .documents import Buffer, Documents, View
    from .settings import Settings

log = logging.getLogger("kina_lsp")

F = TypeVar("F", bound=Callable[..., Any])


class Server(Protocol):
    """What the feature modules see of server.KinaServer (structurally: KinaServer is one)."""
    settings: Settings
    documents: Documents

    @property
    def client_capabilities(self) -> lsp.ClientCapabilities: ...

    @property
    def workspace(self) -> Workspace: ...

    @property
    def work_done_progress(self) -> Progress: ...

    def feature(self, feature_name: str, options: Any | None = None) -> Callable[[F], F]: ...

    def buffer(self, uri: str) -> Buffer | None:
        """(text, version) of an open document, or None (never a file read from disk)."""
        ...

    def position_encoding(self) -> str: ...

    async def view(self, uri: str, wait: bool = False) -> View | None:
        """The analysis of the buffer as it is now, within the request budget unless `wait`."""
        ...

    async def set_validation_diagnostics(self, uri: str, text: str, failing: dict[str, str]) -> None: ...

    def window_show_message(self, params: lsp.ShowMessageParams) -> None: ...

    def window_log_message(self, params: lsp.LogMessageParams) -> None: ...


class Safe(Protocol):
    """The type of `safe` (the feature modules' register() get it)."""
    def __call__(self, default: object = None) -> Callable[[F], F]: ...


def safe(default: object = None) -> Callable[[F], F]:
    """Wrap a handler: log any exception and answer `default` instead.  A JsonRpcException
    is a deliberate error answer (with a message for the user) and goes through."""
    def answer() -> object:
        return default() if callable(default) else default

    def wrap(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(*args, **kwargs)
                except JsonRpcException:
                    raise
                except Exception:
                    log.exception("%s failed", fn.__name__)
                    return answer()
            return cast(F, run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except JsonRpcException:
                raise
            except Exception:
                log.exception("%s failed", fn.__name__)
                return answer()
        return cast(F, run)
    return wrap
