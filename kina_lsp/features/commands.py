"""Commands: `kina.buildAndValidate` and `kina.showMlir` (also the `kina/mlir` request).

Build & validate runs compiler.oracle.validate.validate_file on a worker thread (the
validator itself runs the compiled library in a child process, so an
assertion trap in generated code kills that child, not the server).  Progress
goes to the client as window/workDoneProgress ($/progress begin, a report "building..."
before the build, one "validated f (k/n)" per function, end).
Cancelling the progress, or the request itself ($/cancelRequest; the server
tracks the command's task, see kina_lsp/protocol.py), sets the `cancel` event the
validator polls: the build stops at its next check and the child process that
runs the library is killed; a cancelled run never reports "passed".  The
result is a window/showMessage plus `validate` diagnostics on the name of
every failing function, which stay until the document is edited.

Show MLIR runs the build's front end (parse, check, lower handles, emit) on
the current buffer and returns the text as `{"language": "mlir", "content":
...}`, which a VS Code client opens with
`workspace.openTextDocument({language, content})` as an untitled document.
"""
from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from lsprotocol import types as lsp
from pygls.uris import to_fs_path

from compiler.core.diagnostics import SourceText, UsageError, display_path

from ..documents import View

if TYPE_CHECKING:
    from compiler.oracle.validate import FunctionReport, ValidationReport

    from ..base import Server

log = logging.getLogger(__name__)

VALIDATE_CODE = "validate"
CANCELLED = "Kina: build & validate was cancelled"
_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kina-build")
_running: set[threading.Event] = set()     # cancel events of the validations in progress


class MlirText(TypedDict, total=False):
    """The answer of kina.showMlir / kina/mlir (what the client opens as an untitled document)."""
    language: str        # "mlir", or "text" for diagnostics / an error
    content: str
    ok: bool
    title: str           # the .mlir file name to show (when ok)


class Summary(TypedDict, total=False):
    """The answer of kina.buildAndValidate / kina.validateFunction (summarize())."""
    ok: bool
    message: str
    failing: dict[str, str]      # Kina function -> why it failed
    functions: dict[str, bool]   # display name -> ok
    cancelled: bool


def stop_all(timeout: float = 2.0) -> None:
    """At exit: cancel every validation and give the workers a moment to kill their child
    processes (the server ends with os._exit, which would leave them running)."""
    for cancel in list(_running):
        cancel.set()
    deadline = time.monotonic() + timeout
    while _running and time.monotonic() < deadline:
        time.sleep(0.05)


def _path_for(uri: str) -> str:
    return to_fs_path(uri) or "untitled.kina"


# ---- Show MLIR ----------------------------------------------------------------------
def emit_mlir_text(text: str, path: str) -> MlirText:
    """{"language": "mlir", "content": MLIR} or {"language": "text", "content": the diagnostics}."""
    from compiler import build
    result = build.BuildResult(False, source=SourceText(text, path))
    try:
        mlir = build.front_end(text, path, {}, result)
    except Exception as e:  # a compiler bug must become a message, not a dead server
        log.exception("emit failed")
        return {"language": "text", "content": f"// internal error while emitting MLIR: {e}", "ok": False}
    if mlir is None:
        source = result.source
        rendered = "\n".join(source.render(d) for d in result.diagnostics) if source else ""
        rendered = rendered or "no MLIR was produced"
        return {"language": "text", "content": rendered, "ok": False}
    return {"language": "mlir", "content": mlir, "ok": True,
            "title": display_path(Path(path).with_suffix(".mlir").name)}


async def show_mlir(server: Server, uri: str) -> MlirText:
    cur = server.buffer(uri)
    if cur is None:
        return {"language": "text", "content": f"{display_path(uri)} is not open", "ok": False}
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool, emit_mlir_text, cur[0], _path_for(uri))


# ---- Build & validate ----------------------------------------------------------------
class _Reporter:
    """window/workDoneProgress when the client supports it, silence otherwise."""

    def __init__(self, server: Server) -> None:
        window = server.client_capabilities.window
        self.enabled = bool(window and window.work_done_progress)
        self.progress = server.work_done_progress

    async def create(self, token: lsp.ProgressToken) -> None:
        if self.enabled:
            await self.progress.create_async(token)

    def begin(self, token: lsp.ProgressToken, value: lsp.WorkDoneProgressBegin) -> None:
        if self.enabled:
            self.progress.begin(token, value)

    def report(self, token: lsp.ProgressToken, value: lsp.WorkDoneProgressReport) -> None:
        if self.enabled:
            self.progress.report(token, value)

    def end(self, token: lsp.ProgressToken, value: lsp.WorkDoneProgressEnd) -> None:
        if self.enabled:
            self.progress.end(token, value)

    def on_cancel(self, token: lsp.ProgressToken, callback: Callable[[], None]) -> None:
        fut = self.progress.tokens.get(token) if self.enabled else None
        if fut is not None:  # window/workDoneProgress/cancel cancels this future
            fut.add_done_callback(lambda f: callback() if f.cancelled() else None)


class _Progress:
    """Thread-safe bridge from validate_file's progress(function, done, total) to $/progress."""

    def __init__(self, reporter: _Reporter, token: lsp.ProgressToken, loop: asyncio.AbstractEventLoop) -> None:
        self.reporter, self.token, self.loop = reporter, token, loop

    def __call__(self, function: str, done: int, total: int) -> None:
        if not total:       # validate_file's ("building", 0, 0) before the build
            value = lsp.WorkDoneProgressReport(message=f"{function}...", percentage=0)
        else:               # function k of n has been validated
            value = lsp.WorkDoneProgressReport(message=f"validated {function} ({done}/{total})",
                                               percentage=int(100 * done / total))
        self.loop.call_soon_threadsafe(self.reporter.report, self.token, value)


def _run_validation(text: str, path: str, progress: Callable[[str, int, int], None], cancel: threading.Event,
                    only: Collection[str] | None = None, opt_level: int = 0) -> ValidationReport:
    """Worker thread: validate a copy of the buffer (unsaved edits included); `only`: see
    validate_file (the code lenses validate one function or one gradient)."""
    from compiler.build import builds_again, keep_backend_warm
    builds_again()           # the server builds again: its -O2 builds of a large module in parts
    try:
        return _validate_copy(text, path, progress, cancel, only, opt_level)
    finally:
        _running.discard(cancel)
        if not cancel.is_set():   # the next Build & validate finds its -O2 worker loaded
            keep_backend_warm(opt_level)


def _validate_copy(text: str, path: str, progress: Callable[[str, int, int], None], cancel: threading.Event,
                   only: Collection[str] | None, opt_level: int) -> ValidationReport:
    from compiler.oracle.validate import ValidationReport, validate_file
    if cancel.is_set():      # cancelled while it waited for a free build worker
        report = ValidationReport(path, cancelled=True)
    else:
        with tempfile.TemporaryDirectory(prefix="kina-lsp-") as tmp:
            copy = Path(tmp) / Path(path).name
            copy.write_text(text, encoding="utf-8")
            report = validate_file(str(copy), progress=progress, cancel=cancel.is_set, only=only,
                                   opt_level=opt_level)
    log.info("build & validate of %s stopped: %s", display_path(path), "cancelled" if report.cancelled else "finished")
    return report


async def build_and_validate(server: Server, uri: str, only: Collection[str] | None = None) -> Summary:
    cur = server.buffer(uri)
    if cur is None:
        return {"ok": False, "message": f"{display_path(uri)} is not open"}
    text = cur[0]
    try:
        level = _opt_level(server)
    except UsageError as e:    # the server's $KINA_OPT_LEVEL is no level
        message = f"Kina: build & validate: {e}"
        server.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error, message=message))
        return {"ok": False, "message": message, "failing": {}}
    loop = asyncio.get_running_loop()
    token = f"kina-validate-{uuid.uuid4()}"
    progress = _Reporter(server)
    await progress.create(token)
    progress.begin(token, lsp.WorkDoneProgressBegin(title="Kina: build & validate", cancellable=True,
                                                    message=display_path(Path(_path_for(uri)).name), percentage=0))
    cancel = threading.Event()
    progress.on_cancel(token, cancel.set)
    _running.add(cancel)
    job = loop.run_in_executor(_pool, _run_validation, text, _path_for(uri), _Progress(progress, token, loop), cancel,
                               only, level)
    try:
        report = await asyncio.shield(job)
        summary = summarize(report, level)
    except asyncio.CancelledError:
        # $/cancelRequest or shutdown: stop the worker (the validator kills its child
        # process at the next poll) and report nothing but the cancellation
        cancel.set()
        progress.end(token, lsp.WorkDoneProgressEnd(message=CANCELLED))
        raise
    except Exception as e:
        log.exception("build & validate failed")
        summary = Summary(ok=False, message=f"Kina: build & validate failed: {e}", failing={})
    if cancel.is_set():   # cancelled from the progress UI: the report may still say "passed"
        summary = {**summary, "ok": False, "cancelled": True, "message": CANCELLED, "failing": {}}
    progress.end(token, lsp.WorkDoneProgressEnd(message=summary["message"]))
    server.window_show_message(lsp.ShowMessageParams(
        type=lsp.MessageType.Info if summary["ok"] else lsp.MessageType.Error, message=summary["message"]))
    await server.set_validation_diagnostics(uri, text, summary.get("failing", {}))
    return summary


def _failure(f: FunctionReport) -> str:
    if f.error:
        return f.error
    bad = [c for c in f.checks if not c.ok]
    return "; ".join(f"{c.name} differs from {c.reference} (max abs {c.max_abs:.3g}, max rel {c.max_rel:.3g})"
                     for c in bad) or "failed"


def _opt_level(server: Server) -> int:
    """`kina.validate.optLevel` when the client set it, else the server's $KINA_OPT_LEVEL
    (UsageError when that is not a level), else 0."""
    from compiler.build import default_opt_level
    level = server.settings.opt_level
    return default_opt_level() if level is None else level


def summarize(report: ValidationReport, opt_level: int = 0) -> Summary:
    """A JSON-able summary of a compiler.oracle.validate.ValidationReport built at `opt_level`:
    ok, message, failing {Kina function: reason}, functions {display name: ok}."""
    if report.cancelled and (report.build is None or report.build.ok):
        return {"ok": False, "message": CANCELLED, "failing": {}, "cancelled": True,
                "functions": {f.name: f.ok for f in report.functions}}
    if report.build is None or not report.build.ok:
        diags = report.build.diagnostics if report.build else []
        why = "; ".join(f"[{d.code}] {d.message}" for d in diags[:3]) or "unknown error"
        return {"ok": False, "message": f"Kina: build failed (-O{opt_level}): {why}", "failing": {}, "functions": {}}
    failing: dict[str, str] = {}
    for f in report.functions:
        if not f.ok:
            # a gradient wrapper "g (reverseMode)" is reported on the handled function g, a
            # dynamic function's run "g[B=1, T=4]" on g, with the sizes it failed at
            name, bracket, rest = f.name.partition("[")
            sizes = f" at [{rest.split(']')[0]}]" if bracket else ""
            failing.setdefault(name.split(" ")[0], _failure(f) + sizes)
    n = len(report.functions)
    runs: dict[str, list[str]] = {}    # a dynamic function -> the sizes of its runs
    for f in report.functions:
        name, bracket, rest = f.name.partition("[")
        if bracket and " " not in name:
            runs.setdefault(name, []).append(rest.split("]")[0])
    if report.cancelled:
        message = CANCELLED
    elif failing:
        message = (f"Kina: validation failed (-O{opt_level}, {n - len(failing)}/{n} passed): "
                   + "; ".join(f"{name}: {why}" for name, why in failing.items()))
    else:
        message = f"Kina: build & validate passed ({n}/{n} functions match the interpreter at -O{opt_level})"
        if runs:   # one dynamic library, checked at several sizes: those of its widest function
            widest = max(runs, key=lambda g: (runs[g][0].count("="), g))
            message += (f"; {len(runs)} dynamic function(s), each at {len(runs[widest])} sizes, e.g. {widest} at "
                        + ", ".join(f"[{r}]" for r in runs[widest]))
    return {"ok": report.ok, "message": message, "failing": failing, "cancelled": report.cancelled,
            "functions": {f.name: f.ok for f in report.functions}}


def validation_diagnostics(view: View, failing: dict[str, str]) -> list[lsp.Diagnostic]:
    out: list[lsp.Diagnostic] = []
    for name, why in failing.items():
        fn = view.snapshot.function_named(name) if view else None
        if fn is None:
            continue
        out.append(lsp.Diagnostic(range=view.index.range(fn.name_span), message=f"validation failed: {why}",
                                  code=VALIDATE_CODE, source="kina", severity=lsp.DiagnosticSeverity.Error))
    return out
