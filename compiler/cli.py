"""`kinac`, the command-line front end.

  kinac check FILE... [--format text|json] [--emit types|grad] [--fn NAME]
  kinac run FILE [--entry NAME] [--seed N] [--save OUT.npz]
  kinac fmt [FILE|DIR|-]... [--check] [--diff]
  kinac emit|build|validate ...     (options registered by compiler.build / compiler.oracle.validate)

Exit codes: 0 success, 1 the program has errors (diagnostics printed), 2 the
command could not run (unreadable file, bad UTF-8, no such entry).  The back-end
subcommands are imported only when used, so check and run need nothing but the
front end and the interpreter.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.core.diagnostics import Diagnostic, SourceText, UsageError, display_path, read_source
from compiler.core.sizes import bindings, parse_binding

# The front end (analysis, printer, ...) is imported by the commands that use it: `kinac
# build -O2` first starts its back-end worker (`_prestart`), whose start then overlaps these
# imports.
if TYPE_CHECKING:
    from compiler.ir import nodes as ir
    from compiler.oracle.interp import Value
    from compiler.runtime.arrays import Array
    from compiler.snapshot import Snapshot

# subcommand -> (module, its argparse registration function, its entry point, help); the
# module is imported only when that command runs (the MLIR bindings load slowly).
DELEGATED = {
    "emit": ("compiler.build_cli", "add_emit_args", "cli_emit", "print the MLIR (or LLVM IR) of a file"),
    "build": ("compiler.build_cli", "add_build_args", "cli_build", "compile a file to a host shared library"),
    "validate": ("compiler.oracle.validate", "add_validate_args", "cli_validate",
                 "compare the compiled library with the interpreter and finite differences"),
}

BINDING_KINDS = ("fn", "param", "let")


# ---- check ---------------------------------------------------------------------------
def _has_errors(snap: Snapshot) -> bool:
    return any(d.severity == "error" for d in snap.diagnostics)


def _binding_lines(snap: Snapshot) -> list[str]:
    """`path:line:col: kind name : Type` for every function, parameter and let."""
    out: list[str] = []
    for fact in snap.types:
        if fact.kind in BINDING_KINDS:
            line, col = snap.source.line_col(fact.span.start)
            out.append(f"{display_path(snap.source.path)}:{line}:{col}: {fact.kind} {fact.name} : {fact.type}")
    return out


def _grad_targets(snap: Snapshot, only: str | None) -> list[str]:
    if only:
        return [only]
    from compiler.analysis import handles
    seen: list[str] = []   # the handled functions, in program order
    for fn in snap.program.functions.values():
        for h in handles(fn):
            if h.fn not in seen:
                seen.append(h.fn)
    return seen


def _grad_listing(snap: Snapshot, only: str | None) -> tuple[list[str], list[Diagnostic]]:
    from compiler.ad import transform_ad
    from compiler.ir.printer import format_function
    lines: list[str] = []
    diags: list[Diagnostic] = []
    targets = _grad_targets(snap, only)
    if not targets:
        lines.append(f"// {display_path(snap.source.path)}: no `handle ... with reverseMode`; use --fn NAME to differentiate one")
    for name in targets:
        if name not in snap.program.functions:
            written = snap.function_named(name)
            if written is not None and written.sizes:
                raise UsageError(f"`{name}` is size-generic: --fn differentiates a function at fixed sizes; "
                                 f"name one that handles `{name}`, or list those with --emit=grad alone")
            raise UsageError(f"no function `{name}` that checks cleanly in {display_path(snap.source.path)}")
        fn, ad_diags = transform_ad(snap.program, name)
        diags += ad_diags
        if fn is not None:
            lines.append(format_function(fn))
    return lines, diags


def cmd_check(args: argparse.Namespace) -> int:
    from compiler.analysis import analyze
    failed = False
    reports: list[dict[str, object]] = []
    for path in args.files:
        snap = analyze(read_source(path), path)
        diags = list(snap.diagnostics)
        listing: list[str] = []
        if args.emit == "types":
            listing = _binding_lines(snap)
        elif args.emit == "grad" and not _has_errors(snap):
            listing, more = _grad_listing(snap, args.fn)
            diags += more
        failed |= any(d.severity == "error" for d in diags)
        if args.format == "json":
            reports.append({"path": path, "diagnostics": [snap.source.to_json(d) for d in diags],
                            **({"listing": listing} if args.emit else {})})
            continue
        for d in diags:
            print(snap.source.render(d))
        for source, module_diags in snap.imported_errors():
            for d in module_diags:
                print(source.render(d))
        for line in listing:
            print(line)
    if args.format == "json":
        print(json.dumps(reports if len(reports) != 1 else reports[0], indent=2))
    elif failed:
        n = len(args.files)
        print(f"kinac: errors in {n} file{'s' if n != 1 else ''} checked", file=sys.stderr)
    return 1 if failed else 0


# ---- run -------------------------------------------------------------------------------
def _size_arg(text: str) -> tuple[str, int]:
    try:
        return parse_binding(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _format_result(name: str, value: object) -> str:
    import numpy as np
    arr = np.asarray(value)
    shape = "[" + ", ".join(str(d) for d in arr.shape) + "]"
    return f"{name}: shape {shape} dtype {arr.dtype}\n{np.array2string(arr, precision=6, suppress_small=True)}"


def cmd_run(args: argparse.Namespace) -> int:
    from compiler.analysis import analyze
    from compiler.oracle import interp
    from compiler.runtime.loader import KinaRuntimeError
    snap = analyze(read_source(args.file), args.file)
    if _has_errors(snap):
        for d in snap.diagnostics:
            print(snap.source.render(d))
        for source, module_diags in snap.imported_errors():
            for d in module_diags:
                print(source.render(d))
        return 1
    entry = args.entry or "main"
    try:
        sizes = bindings(args.size)
    except ValueError as err:
        raise UsageError(str(err)) from None
    program, size_diags = snap.program_for(sizes, want_dynamic=False)   # the interpreter runs fixed sizes
    fn = program.functions.get(entry)
    generic = snap.function_named(entry)
    if fn is None and generic is not None and generic.sizes:
        missing = [s.name for s in generic.sizes if s.name not in sizes]
        raise UsageError(f"`{entry}` is size-generic: kinac run interprets one instantiation; pass "
                         + " ".join(f"--size {n}=<n>" for n in missing))
    if fn is None:
        for d in size_diags:
            if d.severity == "error" and entry in d.message:
                print(snap.source.render(d))
                return 1
        hint = "" if args.entry else " (pass --entry NAME to run another function)"
        raise UsageError(f"no function `{entry}` in {display_path(args.file)}{hint}")
    try:
        inputs = interp.random_inputs(fn, seed=args.seed, program=program)
        result = interp.run_function(program, entry, inputs)
    except KinaRuntimeError as e:
        print(f"kinac run: {entry}: {e}", file=sys.stderr)
        return 1
    except MemoryError as e:   # static shapes can ask for more than the machine has
        print(f"kinac run: {entry}: out of memory: {e}", file=sys.stderr)
        return 1
    for p, value in zip(fn.params, inputs):
        print(_format_result(f"input {p.name}", value))
    results = result if isinstance(result, tuple) else (result,)
    for i, out in enumerate(results):
        label = f"{entry} result" if len(results) == 1 else f"{entry} result {i}"
        print(_format_result(label, out))
    if args.save:
        _save(args.save, args.file, fn, inputs, results)
    return 0


def _save(path: str, source: str, fn: ir.Function, inputs: Sequence[Array], results: Sequence[Value]) -> None:
    """OUT.npz with `input_<param>` and `result_<i>`, in the format of compiler/runtime/arrays.py
    (every dtype round-trips: compiler.runtime.library.load_npz restores BF16 / F8)."""
    import numpy as np

    from compiler.core.types import TupleType
    from compiler.ir.nodes import as_tensor
    from compiler.runtime import arrays
    target = arrays.npz_path(path)
    if Path(source).resolve() == target.resolve() or (target.exists() and os.path.samefile(source, target)):
        raise UsageError(f"refusing to write {display_path(target)} over the source file {display_path(source)}")
    data: dict[str, Array] = {f"input_{p.name}": v for p, v in zip(fn.params, inputs)}
    dtypes = {f"input_{p.name}": p.type.dtype for p in fn.params}
    types = fn.ret_type.items if isinstance(fn.ret_type, TupleType) else (fn.ret_type,)
    for i, (value, t) in enumerate(zip(results, types)):
        data[f"result_{i}"], dtypes[f"result_{i}"] = np.asarray(value), as_tensor(t).dtype
    try:
        arrays.save_npz(target, data, dtypes)
    except OSError as e:
        raise UsageError(f"cannot write {display_path(target)}: {e.strerror or e}") from None


# ---- fmt -------------------------------------------------------------------------------
def _fmt_paths(args_files: list[str]) -> list[str]:
    """FILEs as given; a directory stands for the .kina files under it; none means stdin."""
    out: list[str] = []
    for p in args_files or ["-"]:
        if p != "-" and os.path.isdir(p):
            found = sorted(str(f) for f in Path(p).rglob("*.kina") if f.is_file())
            if not found:
                raise UsageError(f"no .kina files under {display_path(p)}")
            out += found
        else:
            out.append(p)
    return out


def _read_stdin() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"standard input is not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x})") from None


def _write_atomic(path: str, text: str) -> None:
    """Replace path's content in one step (a temporary file in the same folder, then rename),
    keeping its permissions; a symlink stays a symlink (its target is rewritten)."""
    import stat
    import tempfile
    target = os.path.realpath(path)
    tmp = None
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
        fd, tmp = tempfile.mkstemp(prefix=".kinac-fmt-", suffix=".tmp", dir=os.path.dirname(target))
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise UsageError(f"cannot write {display_path(path)}: {e.strerror or e} (the file is unchanged)") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def cmd_fmt(args: argparse.Namespace) -> int:
    import difflib

    from compiler import format as fmt
    failed = changed = False
    for path in _fmt_paths(args.files):
        name = "<stdin>" if path == "-" else display_path(path)
        text = _read_stdin() if path == "-" else read_source(path, keep_bom=True)   # fmt keeps a BOM
        try:
            out = fmt.format_source(text)
        except fmt.FormatError as e:
            source = SourceText(text, "<stdin>" if path == "-" else path)
            for d in e.diagnostics:
                print(source.render(d), file=sys.stderr)
            print(f"kinac fmt: {name}: {e} (not formatted)", file=sys.stderr)
            failed = True
            continue
        if path == "-" and not (args.check or args.diff):
            sys.stdout.write(out)
            continue
        if out == text:
            continue
        changed = True
        if args.diff:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(keepends=True), out.splitlines(keepends=True),
                                                       f"{name} (original)", f"{name} (formatted)"))
        if args.check:
            print(f"kinac fmt: {name} would be reformatted", file=sys.stderr)
        elif not args.diff:
            _write_atomic(path, out)
    return 1 if failed or (args.check and changed) else 0


# ---- the parser ----------------------------------------------------------------------------
def _add_delegated(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, wanted: bool) -> None:
    """Register emit/build/validate; their module is imported only when that command runs."""
    module_name, adder, entry, help_text = DELEGATED[name]
    p = sub.add_parser(name, help=help_text)
    if not wanted:
        p.add_argument("rest", nargs=argparse.REMAINDER)
        return
    module = importlib.import_module(module_name)
    getattr(module, adder)(p)
    p.set_defaults(func=getattr(module, entry))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kinac", description="The Kina compiler.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="parse and type-check files; print diagnostics")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--emit", choices=("types", "grad"),
                   help="types: every binding with its type; grad: the backward graph of handled functions")
    p.add_argument("--fn", help="with --emit=grad: differentiate this function")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("run", help="evaluate `main` (or --entry NAME) with the NumPy interpreter")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--entry", help="the function to run on deterministic generated inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    p.add_argument("--size", action="append", type=_size_arg, default=[], metavar="NAME=N",
                   help="bind the sizes of a generic entry (repeat: --size B=4 --size T=64)")
    p.add_argument("--save", metavar="OUT.npz", help="also write the inputs and results to a .npz file "
                   "(BF16/F8 stored as exact float32; compiler.runtime.library.load_npz restores every dtype)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("fmt", help="format files in the Kina style (in place; stdin to stdout)")
    p.add_argument("files", nargs="*", metavar="FILE", help="files or folders of .kina files; `-` or none: stdin")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would be reformatted")
    p.add_argument("--diff", action="store_true", help="change nothing; print what would change as a diff")
    p.set_defaults(func=cmd_fmt)
    for name in DELEGATED:
        _add_delegated(sub, name, wanted=(name == command))
    return parser


def _prestart(command: str | None, argv: Sequence[str]) -> bool:
    """`build` / `validate` at -O1..-O3: start the back end's worker process now (it
    loads the MLIR bindings while this process imports and runs the front end), unless
    the build cache's hint says this build will hit (`_hinted_hit`); whether it did."""
    if command not in ("build", "validate"):
        return False
    levels = [a[2:] for a in argv if a in ("-O0", "-O1", "-O2", "-O3")]
    level = levels[-1] if levels else os.environ.get("KINA_OPT_LEVEL", "0")
    if level not in ("1", "2", "3") or importlib.util.find_spec("mlir") is None:
        return False
    if command == "build" and "--no-cache" not in argv and _hinted_hit(argv, int(level)):
        return False
    from compiler.backend import worker as backend_worker
    backend_worker.prestart()
    return True


def _hinted_hit(argv: Sequence[str], level: int) -> bool:
    """Whether the one .kina file among `kinac build`'s arguments has a cache hint that
    names an intact library (what build_source checks before it starts a worker)."""
    from compiler.backend import cache
    files = [a for a in argv[1:] if a.endswith(".kina") and not a.startswith("-")]
    if len(files) != 1 or not cache.enabled():
        return False
    try:
        text = Path(files[0]).read_text(encoding="utf-8")
        return cache.hinted_hit(cache.source_hint(text, level))
    except (OSError, UnicodeDecodeError):
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else None
    prestarted = False
    try:
        prestarted = _prestart(command, argv)
        args = build_parser(command).parse_args(argv)
        func: Callable[[argparse.Namespace], int] = args.func   # each subcommand's set_defaults
        return func(args)
    except UsageError as e:
        print(f"kinac: error: {e}", file=sys.stderr)
        return 2
    except RecursionError:
        print("kinac: error: the program is nested too deeply to process", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `kinac run ... | head`: the reader went away; exit quietly like other Unix tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        if prestarted:   # this command's worker, if its build did not take it, ends here
            from compiler.backend import worker as backend_worker
            backend_worker.drop_spare()


if __name__ == "__main__":
    sys.exit(main())
