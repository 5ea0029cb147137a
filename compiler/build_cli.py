"""The command lines of `kinac build` and `kinac emit` (compiler/build.py does the work).

Also the argument groups other commands share: `-O0..-O3` (add_opt_args), `--size`
(add_size_args, sizes_of) and `--vjp` (add_vjp_args); `kinac validate` uses them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiler.backend import errors as toolchain_errors
from compiler.backend import toolchain
from compiler.build import BuildResult, build_file, checked_exports, default_opt_level, front_end, print_diagnostics
from compiler.core.diagnostics import Diagnostic, SourceText, Span, UsageError, display_path, read_source
from compiler.core.progress import Ticker
from compiler.core.sizes import bindings, parse_binding
from compiler.outputs import check_outputs


def _opt(args: argparse.Namespace) -> int:
    level: int | None = getattr(args, "opt_level", None)
    return default_opt_level() if level is None else level


def add_opt_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-O0", dest="opt_level", action="store_const", const=0, help="no optimisation (the default, unless $KINA_OPT_LEVEL says otherwise)")
    # -O1 and -O3 are -O2's MLIR pipeline with LLVM's `opt`/`llc` at that level
    for level, what in ((1, "-O2's pipeline, LLVM at -O1"), (2, "optimise"), (3, "-O2's pipeline, LLVM at -O3")):
        group.add_argument(f"-O{level}", dest="opt_level", action="store_const", const=level, help=what)
    parser.set_defaults(opt_level=None)


def add_build_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .kina source file")
    parser.add_argument("-o", "--output", help="the shared library to write (default: FILE.so)")
    parser.add_argument("--timings", action="store_true", help="print the time of each stage")
    parser.add_argument("--no-cache", action="store_true",
                        help="build even when the build cache holds this library (also: KINA_CACHE=0)")
    add_size_args(parser)
    parser.add_argument("--export", action="append", default=[], metavar="NAME",
                        help="export only this function (repeat; with what it calls): e.g. the step a "
                             "trainer calls, from a file whose --size values bind many generic functions")
    add_vjp_args(parser)
    add_opt_args(parser)


def add_vjp_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vjp", action="append", default=[], metavar="NAME",
                        help="also export NAME_vjp(args.., g_y) -> (y, cotangents of the float args): the "
                             "vector-Jacobian product of NAME for an incoming cotangent g_y (repeat; docs/interop.md)")


def _size_arg(text: str) -> tuple[str, int]:
    try:
        return parse_binding(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_size_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", action="append", type=_size_arg, default=[], metavar="NAME=N",
                        help="bind a size of the generic functions to export (repeat: --size B=4 --size T=64)")


def sizes_of(args: argparse.Namespace) -> dict[str, int]:
    """The --size values; a size given twice with different values is a usage error."""
    try:
        return bindings(getattr(args, "size", None) or [])
    except ValueError as err:
        raise UsageError(str(err)) from None


def format_timings(timings: dict[str, float]) -> str:
    width = max((len(k) for k in timings), default=5)
    rows = [f"  {k:<{width}}  {v * 1000:8.1f} ms" for k, v in timings.items()]
    rows.append(f"  {'total':<{width}}  {sum(timings.values()) * 1000:8.1f} ms")
    return "\n".join(rows)


def cli_build(args: argparse.Namespace) -> int:
    timings: dict[str, float] = {}
    only = getattr(args, "export", None) or []
    with Ticker(sys.stderr, f"kinac build: building {display_path(args.file)}"):   # a terminal, after 2 s
        result = build_file(args.file, args.output, getattr(args, "opt_level", None), timings,
                            transform=checked_exports(only) if only else None,
                            cache=False if getattr(args, "no_cache", False) else None, sizes=sizes_of(args),
                            vjp=getattr(args, "vjp", None) or [])
    print_diagnostics(result)
    if getattr(args, "timings", False):
        print(format_timings(timings))
    if not result.ok:
        print(f"kinac build: {display_path(args.file)}: build failed", file=sys.stderr)
        return 1
    assert result.manifest is not None and result.so_path and result.manifest_path and result.header_path   # set by a build that is ok
    fns = result.manifest["functions"]
    dynamic = [f["name"] for f in fns if f.get("sizes")]
    # a dynamic function's sizes are read at each call (docs/compiling.md, "Dynamic sizes")
    what = f"; {len(dynamic)} dynamic: any sizes" if dynamic else ""
    print(f"wrote {display_path(result.so_path)} ({len(fns)} functions{what}"
          f"{', from the build cache' if result.cached else ''}), "
          f"{display_path(result.manifest_path.name)}, {display_path(result.header_path.name)}")
    return 0


def add_emit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the .kina source file")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--mlir", action="store_true", help="print the MLIR the compiler emits (default)")
    kind.add_argument("--llvm", action="store_true", help="print the LLVM IR after the pass pipeline")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")
    add_size_args(parser)
    add_opt_args(parser)


def cli_emit(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if getattr(args, "output", None):
        check_outputs(path, {"output": Path(args.output)})
    text = read_source(path)
    result = BuildResult(False, source=SourceText(text, str(path)))
    mlir = front_end(text, str(path), {}, result, sizes=sizes_of(args))
    out = mlir
    if mlir is not None and getattr(args, "llvm", False):
        try:
            out, diags = toolchain.mlir_to_llvm_ir(mlir, opt_level=_opt(args),
                                                   source=result.source)
        except toolchain_errors.ToolchainError as e:
            out, diags = None, [Diagnostic("toolchain", str(e), Span(0, 0))]
        result.diagnostics += diags
    print_diagnostics(result)
    if out is None:
        return 1
    if getattr(args, "output", None):
        Path(args.output).write_text(out)
    else:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0
