"""grammar.lark loaded into lark: its text (GRAMMAR) and `load(**extra)`, its LALR Lark.

One configuration serves both users, so their terminals agree and the recovery can feed
the lexer's tokens to the parser: the parser (syntax/builder.py, which passes its AST
transformer as `extra`) and the lexer (syntax/lex.py, which takes the terminals and the
basic lexer of the same object).

Building the LALR tables and the terminals from the grammar costs ~120 ms, at every
start of kinac and of the language server, so they come from lark's own cache
(`Lark(..., cache=path)`): lark heads the file with a SHA-256 of the grammar text, the
options, lark's version and Python's, loads it when that key matches, and otherwise (an
edited grammar, a damaged, truncated or foreign file) builds the tables as without a
cache and rewrites the file (a file another process is writing at that moment reads as
damaged: built too).  The file is a pickle, so it is kept only in a directory of this
user's that nobody else can write: $XDG_CACHE_HOME/kina/parser, else
~/.cache/kina/parser, holding the files of the last KEEP grammars.  Where there is none
(no home, a read-only or shared directory), the tables are built each time.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import lark
from lark import Lark

GRAMMAR = Path(__file__).with_name("grammar.lark").read_text(encoding="utf-8")

OPTIONS: dict[str, Any] = {"parser": "lalr", "lexer": "basic", "keep_all_tokens": True, "maybe_placeholders": False}


def cache_dir() -> Path | None:
    """The directory of the cached tables, created if need be (private: mode 0700); None
    when it cannot be made, or when another user owns it or could write into it."""
    try:
        d = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kina" / "parser"
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = d.stat()
    except (OSError, RuntimeError):        # RuntimeError: Path.home() found no home directory
        return None
    if os.name == "posix" and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        return None
    return d


KEEP = 8   # cache files kept: those of the grammars, larks and Pythons used last


def cache_file() -> str | bool:
    """Where lark keeps the tables (False: nowhere).  One file per grammar text, lark and
    Python, so two checkouts or virtual environments do not keep rewriting one file; when
    this one is missing (lark is about to write it), all but the newest KEEP others go."""
    d = cache_dir()
    if d is None:
        return False
    key = hashlib.sha256(f"{GRAMMAR}\0{lark.__version__}\0{sys.version_info[:2]}".encode()).hexdigest()[:16]
    path = d / f"grammar-{key}.lark-cache"
    if not path.exists():
        _prune(d)
    return str(path)


def _prune(d: Path) -> None:
    try:
        files = sorted(d.glob("grammar-*.lark-cache"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[KEEP - 1:]:
            old.unlink()
    except OSError:    # another process pruned first
        pass


def load(**extra: Any) -> Lark:
    """A Lark of grammar.lark with OPTIONS (and `extra`, e.g. the parser's transformer, which
    lark keeps out of the cache's key), from the cache when it is there and current."""
    return Lark(GRAMMAR, cache=cache_file(), **OPTIONS, **extra)
