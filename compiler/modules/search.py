"""Where `import layers` looks: the importing file's folder, then each folder of $KINA_PATH
(os.pathsep-separated), then the standard library shipped in the package (compiler/std/).
The first `layers.kina` found wins, so a local file shadows a library module of the same
name, as in Python.  `import "path/to/file.kina" as name` names one file, relative to the
importing file's folder (or absolute).  Paths are made absolute and normalised, so that
one file is one module however it is reached."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from compiler.core.stdlib import STD_DIR
from compiler.syntax.imports import ImportDecl

Reader = Callable[[str], "str | None"]


def kina_path_dirs(value: str | None = None) -> list[str]:
    """The folders of $KINA_PATH (or of `value`), in order, empty entries skipped."""
    raw = os.environ.get("KINA_PATH", "") if value is None else value
    return [os.path.abspath(p) for p in raw.split(os.pathsep) if p]


def search_path(importer: str, kina_path: Sequence[str]) -> list[str]:
    """The folders `import NAME` searches for a file written in `importer`."""
    here = os.path.dirname(os.path.abspath(importer)) if importer and not importer.startswith("<") else os.getcwd()
    out: list[str] = []
    for d in [here, *kina_path, STD_DIR]:
        if d not in out:
            out.append(d)
    return out


def normal(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def candidates(decl: ImportDecl, importer: str, kina_path: Sequence[str]) -> list[str]:
    """The files the import may name, in the order they are tried."""
    if decl.path is not None:
        base = search_path(importer, ())[0]
        return [normal(os.path.join(base, decl.path))]
    module = decl.module or ""
    return [normal(os.path.join(d, module + ".kina")) for d in search_path(importer, kina_path)]


def resolve(decl: ImportDecl, importer: str, kina_path: Sequence[str], read: Reader) -> tuple[str | None, list[str]]:
    """(the file the import names, or None; the files tried)."""
    tried = candidates(decl, importer, kina_path)
    for path in tried:
        if read(path) is not None:
            return path, tried
    return None, tried


def is_std(path: str) -> bool:
    return os.path.dirname(path) == STD_DIR
