"""A dynamic export called from C through its lib.h (issue 25): the checked entry takes the
sizes, then the descriptors; it checks every descriptor against the shapes at those sizes
and returns KINA_BAD_SIZES + i (descriptor i) or KINA_BAD_SIZES + n + j (size j < 1)
without calling the function."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from compiler import build

SOURCE = """\
// rows of x with their first column dropped, doubled, and the sum of each row
fn tail2[N, D](x: Tensor[F32, [N, D + 1]]) -> (Tensor[F32, [N, D]], Tensor[F32, [N, 1]]) {
  let t = x.slice(axis=1, start=1, stop=D + 1) in
  let y = t * 2.0 in
  let s = y.reduce_keep(op=sum, axis=1) in
  (y, s)
}
"""

MAIN_C = r"""
#include <stdio.h>
#include "lib.h"

static kina_memref_f32_2d desc(float *p, int64_t r, int64_t c) {
  kina_memref_f32_2d d = {p, p, 0, {r, c}, {c, 1}};
  return d;
}

int main(void) {
  float x[3 * 5], y[3 * 4], s[3];
  for (int i = 0; i < 15; i++) x[i] = (float)i;
  kina_memref_f32_2d dx = desc(x, 3, 5), dy = desc(y, 3, 4), ds = desc(s, 3, 1);
  int32_t ok = _kina_checked_kina_tail2(3, 4, &dx, &dy, &ds);
  printf("ok=%d y00=%g y23=%g s2=%g\n", ok, y[0], y[11], s[2]);
  /* D = 5 does not match x's 5 columns (D + 1 = 6): descriptor 0 is refused */
  int32_t bad_x = _kina_checked_kina_tail2(3, 5, &dx, &dy, &ds);
  /* the output has 4 columns but N = 2 rows are promised by the sizes... x has 3: descriptor 0 */
  int32_t bad_n = _kina_checked_kina_tail2(2, 4, &dx, &dy, &ds);
  kina_memref_f32_2d small = desc(y, 3, 3);
  int32_t bad_out = _kina_checked_kina_tail2(3, 4, &dx, &small, &ds);
  int32_t bad_size = _kina_checked_kina_tail2(0, 4, &dx, &dy, &ds);
  printf("codes %d %d %d %d (bad sizes base %d)\n", bad_x, bad_n, bad_out, bad_size, KINA_BAD_SIZES);
  return ok;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_c_program_calls_a_dynamic_export_through_its_header(tmp_path: Path) -> None:
    src = tmp_path / "lib.kina"
    src.write_text(SOURCE)
    res = build.build_file(src, tmp_path / "lib.so", opt_level=0, cache=False)
    assert res.ok, res.diagnostics
    header = (tmp_path / "lib.h").read_text()
    assert "int32_t _kina_checked_kina_tail2(int64_t N, int64_t D, kina_memref_f32_2d *x," in header
    assert "tail2[N, D](x: F32[N, D + 1]) -> (F32[N, D], F32[N, 1])" in header
    (tmp_path / "main.c").write_text(MAIN_C)
    exe = tmp_path / "main"
    cc = subprocess.run(["cc", "main.c", "-o", str(exe), str(tmp_path / "lib.so"), f"-Wl,-rpath,{tmp_path}"], cwd=tmp_path,
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    # y = 2 * x[:, 1:]: y[0,0] = 2 * x[0,1] = 2; y[2,3] = 2 * x[2,4] = 28; s[2] = 2 * (11+12+13+14) = 100
    assert "ok=0 y00=2 y23=28 s2=100" in run.stdout
    n = 3   # descriptors: x, y, s
    assert f"codes 2 2 3 {2 + n + 0} (bad sizes base 2)" in run.stdout
