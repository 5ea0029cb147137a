"""The library, not the manifest, is the authority on its functions (defects item 2).

A manifest edited by hand (a shape "just changed", a dtype, the order of parameters, a
result dropped or added, an index bound) still carries the library's SHA-256, so the
digest check passes; it used to pass [2, 2] buffers to code compiled for [512, 512] and
die of SIGSEGV.  runtime.load now compares the manifest with the library's own
description (`_kina_abi`), each entry point compares the descriptors' sizes with its
compiled shapes (an error code: KinaRuntimeError naming the parameter; a C caller
through lib.h gets the code), and an index bound the manifest raises is caught by the
library's own bounds check (KinaIndexError).  Every call that could crash runs in a
child process, so a crash is a failed test, not a dead test run.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compiler import build

ROOT = Path(__file__).resolve().parent.parent
SOURCE = """
fn rows(t: Tensor[F32, [4, 3]], ids: Tensor[I64, [2]]) -> (Tensor[F32, [2, 3]], Tensor[F32, [4, 3]]) {
  (gather(t, ids), t * 2.0)
}
fn pick(t: Tensor[F32, [2, 4]], x: Tensor[F32, [3, 5]]) -> Tensor[F32, [3, 1, 4]] {
  let j = x.argmax(axis=1) in
  gather(t, j)
}
"""


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("abi")
    (d / "m.kina").write_text(SOURCE)
    res = build.build_file(d / "m.kina", d / "m.so")   # at $KINA_OPT_LEVEL (CI: 0 and 2)
    assert res.ok, [d.message for d in res.diagnostics]
    return res.so_path


# The child: load with the manifest given, call rows with arrays of the manifest's own
# types (what a user who edited it would pass) and print the outcome.
CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from compiler.runtime import library as runtime
    from compiler.runtime.library import KinaFunction
    so, manifest, mode = sys.argv[1], json.loads(open(sys.argv[2]).read()), sys.argv[3]
    try:
        if mode == "bypass":     # skip the load check: the entry point's own size check answers
            lib = runtime.load(so)
            entry = manifest["functions"][0]
            fns = [KinaFunction(lib._dll._kina_packed_kina_rows, entry, fastcall=fc) for fc in (True, False)]
        else:
            fns = [runtime.load(so, manifest, fastcall=fc).rows for fc in (True, False)]
        for f in fns:
            # floats 3.0; an index parameter the largest id its (manifest's) bound allows
            args = [np.full(p.shape, 3 if p.bound is None else p.bound - 1, p.np_dtype) for p in f.params]
            f(*args)
            print("called")
    except (runtime.KinaArgumentError, runtime.KinaRuntimeError) as e:
        print(type(e).__name__ + ":", e)
""")


def _edit_shape(m):
    m["functions"][0]["params"][0]["shape"] = [512, 512]


def _edit_dtype(m):
    m["functions"][0]["params"][0]["dtype"] = "F16"


def _edit_result_dtype(m):
    m["functions"][0]["results"][1]["dtype"] = "BF16"


def _edit_order(m):
    m["functions"][0]["params"].reverse()


def _drop_result(m):
    m["functions"][0]["results"].pop()


def _add_result(m):
    m["functions"][0]["results"].append({"dtype": "F32", "shape": [2]})


def _raise_bound(m):        # the runtime's pre-check lets id 8 through; the library's check does not
    m["functions"][0]["params"][1]["index_bound"] = 9


def _bad_bound(m):
    m["functions"][0]["params"][1]["index_bound"] = "four"


def _bad_shape_value(m):
    m["functions"][0]["params"][0]["shape"] = [4, "3"]


EDITS = [
    (_edit_shape, "KinaRuntimeError: the manifest of m.so says parameter `t` of `rows` is Tensor[F32, [512, 512]], "
                  "but the library was compiled for Tensor[F32, [4, 3]]"),
    (_edit_dtype, "says parameter `t` of `rows` is Tensor[F16, [4, 3]], but the library was compiled for "
                  "Tensor[F32, [4, 3]]"),
    (_edit_result_dtype, "says result `1` of `rows` is Tensor[BF16, [4, 3]], but the library was compiled for "
                         "Tensor[F32, [4, 3]]"),
    (_edit_order, "says parameter `ids` of `rows` is Tensor[I64, [2]], but the library was compiled for "
                  "Tensor[F32, [4, 3]]"),
    (_drop_result, "gives `rows` 1 result(s), but the library was compiled with 2"),
    (_add_result, "gives `rows` 3 result(s), but the library was compiled with 2"),
    (_raise_bound, "KinaIndexError: rows: gather index out of bounds"),
    (_bad_bound, "KinaRuntimeError: the manifest gives parameter `ids` of `rows` the index_bound 'four'"),
    (_bad_shape_value, "describes parameter `t` of `rows` wrongly"),
]


def _child(lib_path: Path, manifest: dict, tmp_path: Path, mode: str = "load") -> str:
    (tmp_path / "edited.json").write_text(json.dumps(manifest))
    (tmp_path / "child.py").write_text(CHILD)
    r = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(lib_path), str(tmp_path / "edited.json"),
                        mode], capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, f"the child died ({r.returncode}): {r.stdout}{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("edit, expected", EDITS, ids=[e.__name__.strip("_") for e, _ in EDITS])
def test_each_edited_manifest_field_is_a_clear_error_never_a_signal(lib_path, tmp_path, edit, expected):
    manifest = json.loads(lib_path.with_suffix(".json").read_text())
    edit(manifest)
    out = _child(lib_path, manifest, tmp_path)
    assert expected in out, out
    assert "called" not in out, out


def test_the_untouched_manifest_calls(lib_path, tmp_path):
    manifest = json.loads(lib_path.with_suffix(".json").read_text())
    assert _child(lib_path, manifest, tmp_path).split() == ["called", "called"]


def test_the_entry_point_checks_the_descriptor_sizes_itself(lib_path, tmp_path):
    """With the load check bypassed, a shape the library was not compiled for reaches the
    entry point, which returns 2 + i without calling: KinaRuntimeError naming the parameter
    (both call paths)."""
    manifest = json.loads(lib_path.with_suffix(".json").read_text())
    manifest["functions"][0]["params"][1]["shape"] = [5]
    manifest["functions"][0]["params"][1].pop("index_bound")
    out = _child(lib_path, manifest, tmp_path, "bypass")
    assert ("KinaRuntimeError: rows: the library was not compiled for parameter `ids` as Tensor[I64, [5]]"
            in out), out
    manifest = json.loads(lib_path.with_suffix(".json").read_text())
    manifest["functions"][0]["results"][0]["shape"] = [2, 2]
    out = _child(lib_path, manifest, tmp_path, "bypass")
    assert "KinaRuntimeError: rows: the library was not compiled for out= `result 0` as Tensor[F32, [2, 2]]" in out


C_MAIN = r"""
#include <stdio.h>
#include "m.h"

int main(void) {
    float t[12], out_rows[6] = {0}, out_twice[12] = {0}, u[8] = {0}, x[15], picked[12] = {0};
    int64_t ids[2] = {3, 1};
    for (int i = 0; i < 12; i++) t[i] = (float)i;
    kina_memref_f32_2d dt = {t, t, 0, {4, 3}, {3, 1}}, drows = {out_rows, out_rows, 0, {2, 3}, {3, 1}};
    kina_memref_f32_2d dtwice = {out_twice, out_twice, 0, {4, 3}, {3, 1}};
    kina_memref_i64_1d dids = {ids, ids, 0, {2}, {1}};
    int code = _kina_checked_kina_rows(&dt, &dids, &drows, &dtwice);
    printf("ok %d %g %g\n", code, out_rows[0], out_twice[11]);
    kina_memref_f32_2d small = {t, t, 0, {2, 2}, {2, 1}};          /* "I just changed the size" */
    printf("sizes %d\n", _kina_checked_kina_rows(&small, &dids, &drows, &dtwice));
    kina_memref_f32_2d short_out = {out_twice, out_twice, 0, {4, 2}, {2, 1}};
    printf("out %d\n", _kina_checked_kina_rows(&dt, &dids, &drows, &short_out));
    for (int i = 0; i < 15; i++) x[i] = 0.0f;
    x[9] = 1.0f;                                                     /* argmax 4 of row 1: outside [0, 2) */
    kina_memref_f32_2d du = {u, u, 0, {2, 4}, {4, 1}}, dx = {x, x, 0, {3, 5}, {5, 1}};
    kina_memref_f32_3d dp = {picked, picked, 0, {3, 1, 4}, {4, 4, 1}};
    code = _kina_checked_kina_pick(&du, &dx, &dp);
    printf("index %d %s\n", code, code == KINA_INDEX_ERROR ? _kina_last_error() : "-");
    x[9] = 0.0f;
    code = _kina_checked_kina_pick(&du, &dx, &dp);
    printf("again %d %s\n", code, _kina_last_error() ? "stale" : "clear");
    printf("codes %d %d %d\n", KINA_OK, KINA_INDEX_ERROR, KINA_BAD_SIZES);
    return 0;
}
"""


def test_a_c_caller_gets_the_error_codes_through_lib_h(lib_path, tmp_path):
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp_path / "main.c").write_text(C_MAIN)
    shutil.copy(lib_path.with_suffix(".h"), tmp_path / "m.h")
    exe = tmp_path / "main"
    built = subprocess.run([cc, "-Wall", "-Werror", str(tmp_path / "main.c"), "-I", str(tmp_path), str(lib_path),
                            f"-Wl,-rpath,{lib_path.parent}", "-o", str(exe)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "ok 0 9 22"                 # rows: t[3, 0] = 9; twice: 2 * 11
    assert lines[1] == "sizes 2"                   # KINA_BAD_SIZES + 0: descriptor 0, `t`
    assert lines[2] == "out 5"                     # KINA_BAD_SIZES + 3: the second output
    assert lines[3] == "index 1 gather index out of bounds"
    assert lines[4] == "again 0 clear"
    assert lines[5] == "codes 0 1 2"
