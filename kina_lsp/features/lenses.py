"""Code lenses above each function: "Build & validate" (compile the file, run this
function's compiled code against the interpreter) and, above every function that
some function differentiates with `handle f(..) with reverseMode`, "Gradient
check" (the compiled cotangents of f against finite differences).

Both run the command `kina.validateFunction` [uri, function, "function" |
"gradient"], which is the Build & validate machinery (commands.py, the
validator's child process) narrowed to one exported function: f itself, or
validate's gradient wrapper of f.  A lens only names a command; nothing runs
until the user clicks it, and the client runs nothing in an untrusted
workspace (the VS Code extension shows no lenses there and refuses the command;
the server gets no trust signal of its own).  The command's handler is in
kina_lsp/server.py (pygls reads a command handler's annotations when it runs, and
this module knows the server only as base.Server, for the type checker).

A size-generic function (`fn linear[M, K, N](..)`) gets the "Build & validate" lens:
the editor builds without --size values, so it is a dynamic export (docs/compiling.md,
"Dynamic sizes"), which validation checks at three size assignments.  It gets no
"Gradient check" lens: the handles of it at fixed sizes differentiate private
instantiations, which its callers' gradient checks cover.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from lsprotocol import types as lsp

from compiler.core.diagnostics import display_path
from compiler.syntax import nodes as ast
from compiler.syntax import walk as ast_walk

from ..documents import View
from . import commands
from .commands import Summary

if TYPE_CHECKING:
    from ..base import Safe, Server

CMD_VALIDATE_FUNCTION = "kina.validateFunction"
KINDS = ("function", "gradient")


def differentiated(module: ast.Module | None) -> set[str]:
    """Names of the functions some function handles with reverseMode."""
    out: set[str] = set()
    stack: list[ast.FnDef | ast.Expr] = list(module.functions if module else ())
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Handle) and node.handler == "reverseMode":
            out.add(node.call.func)
        stack.extend(ast_walk.children(node))
    return out


def code_lenses(view: View, uri: str) -> list[lsp.CodeLens]:
    module = view.snapshot.module
    grads = differentiated(module)
    out: list[lsp.CodeLens] = []
    for fn in (module.functions if module else ()):
        a, b = view.index.positions([fn.name_span.start, fn.name_span.end])
        rng = lsp.Range(start=a, end=b)
        out.append(lsp.CodeLens(range=rng, command=lsp.Command(
            title="Build & validate", command=CMD_VALIDATE_FUNCTION, arguments=[uri, fn.name, "function"])))
        if fn.name in grads and not fn.sizes:   # see the module docstring
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(
                title="Gradient check", command=CMD_VALIDATE_FUNCTION, arguments=[uri, fn.name, "gradient"])))
    return out


def refusal(message: str) -> Summary:
    return {"ok": False, "message": f"Kina: {message}", "failing": {}, "functions": {}}


def _strings(args: list[object]) -> TypeGuard[list[str]]:
    return all(isinstance(a, str) for a in args)


async def validate_function(ls: Server, args: list[object]) -> Summary:
    """The command: check its arguments, then Build & validate narrowed to one function."""
    if len(args) != 3 or not _strings(args) or args[2] not in KINDS:
        return refusal(f"{CMD_VALIDATE_FUNCTION} takes [uri, function name, \"function\" | \"gradient\"]")
    uri, name, kind = args
    view = await ls.view(uri, wait=True)
    if view is None:
        return refusal(f"{display_path(uri)} is not open")
    fn = view.snapshot.function_named(name)
    generic = fn is not None and bool(fn.sizes)
    if generic and kind == "gradient":
        return refusal(f"`{name}` is size-generic: check the gradients of the functions that differentiate it")
    program = view.snapshot.program_for({})[0] if generic else view.snapshot.program   # a dynamic export
    if name not in program.functions:
        return refusal(f"`{name}` does not check cleanly (or does not exist): fix its errors first")
    if kind == "gradient" and name not in differentiated(view.snapshot.module):
        return refusal(f"no function differentiates `{name}` with `handle {name}(..) with reverseMode`")
    # imported here, as commands.py imports validate: it brings NumPy and the whole build,
    # which the server's start (every editor's first keystroke) does not need
    from compiler.oracle.validate import GRAD_PREFIX
    only = {GRAD_PREFIX + name} if kind == "gradient" else {name}
    return await commands.build_and_validate(ls, uri, only=only)


def register(server: Server, safe: Safe) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_CODE_LENS, lsp.CodeLensOptions(resolve_provider=False))
    @safe(default=list)
    async def on_code_lens(ls: Server, params: lsp.CodeLensParams) -> list[lsp.CodeLens]:
        view = await ls.view(params.text_document.uri)
        return code_lenses(view, params.text_document.uri) if view else []
