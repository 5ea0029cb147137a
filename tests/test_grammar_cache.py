"""syntax/grammar.py: the parser's tables come from lark's cache in a private per-user
directory; a damaged or foreign cache file is rebuilt, a directory others could write is
not used, and a parser loaded from the cache parses exactly as one built from the grammar."""
import os

import pytest
from lark import Lark

from compiler.syntax import grammar

PROGRAM = """fn f[N](x: Tensor[F32, [N, 4]], w: Tensor[F32, [4, 2]]) -> Tensor[F32, [N, 2]] {
  let y = (x @ w).relu() * -2.5e-1 in   // a comment
  y.sum(axis=0, keepdims=true) + inf
}"""


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "kina" / "parser"


def _tree(parser):
    return parser.parse(PROGRAM).pretty()


def test_cache_is_written_privately_and_loaded(cache_home):
    built = grammar.load()
    path = grammar.cache_file()
    assert isinstance(path, str) and os.path.dirname(path) == str(cache_home)
    assert oct(cache_home.stat().st_mode & 0o777) == oct(0o700)
    written = os.path.getmtime(path)
    loaded = grammar.load()
    assert os.path.getmtime(path) == written                 # a hit does not rewrite
    assert loaded.source_path == "<deserialized>"          # lark loaded it rather than built it
    assert _tree(loaded) == _tree(built) == _tree(Lark(grammar.GRAMMAR, **grammar.OPTIONS))


DAMAGES = {
    "empty": lambda good: b"",
    "foreign": lambda good: b"not lark's\n\x80\x04not a pickle",
    "truncated": lambda good: good[:len(good) // 2],                    # the key matches, the tables are cut
    "another-key": lambda good: b"0" * 64 + good[good.index(b"\n"):],  # another grammar's tables
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_or_foreign_file_is_rebuilt(cache_home, damage):
    grammar.load()
    path = grammar.cache_file()
    assert isinstance(path, str)
    with open(path, "rb") as f:
        whole = f.read()
    good = whole[:whole.index(b"\n")]
    with open(path, "wb") as f:
        f.write(damage(whole))
    parser = grammar.load()
    assert parser.source_path != "<deserialized>" and _tree(parser) == _tree(Lark(grammar.GRAMMAR, **grammar.OPTIONS))
    with open(path, "rb") as f:
        assert f.readline().rstrip(b"\n") == good              # the file is whole again: the next start loads it
    assert grammar.load().source_path == "<deserialized>"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_directory_others_can_write_is_not_used(cache_home):
    cache_home.mkdir(parents=True)
    cache_home.chmod(0o777)
    assert grammar.cache_dir() is None and grammar.cache_file() is False
    assert grammar.load().parse(PROGRAM) is not None
    assert list(cache_home.iterdir()) == []


def test_old_files_are_pruned(cache_home):
    """Files of other grammars (or larks, Pythons): the newest KEEP stay, with ours."""
    cache_home.mkdir(parents=True)
    for i in range(grammar.KEEP + 3):
        old = cache_home / f"grammar-old{i}.lark-cache"
        old.write_bytes(b"another grammar's tables")
        os.utime(old, (1000 + i, 1000 + i))
    (cache_home / "unrelated").write_text("kept")
    grammar.load()
    kept = sorted(p.name for p in cache_home.iterdir())
    assert kept == sorted([os.path.basename(str(grammar.cache_file())), "unrelated"]
                          + [f"grammar-old{i}.lark-cache" for i in range(4, grammar.KEEP + 3)])
