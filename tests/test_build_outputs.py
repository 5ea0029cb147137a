"""Commands never overwrite their input or write an artifact over a source (issue 12), the
validation child imports nothing from the caller's working directory, and `kinac run --save`
round-trips every dtype."""
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from compiler.core.types import DType
from compiler.oracle import validate
from compiler.runtime import library as runtime

ROOT = Path(__file__).resolve().parent.parent
KINAC = [sys.executable, "-m", "compiler.cli"]
SOURCE = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x + x\n}\n"


def kinac(*args, cwd):
    return subprocess.run([*KINAC, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _usage_error(r, *words) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.mark.parametrize("cmd,output", [
    ("build", "x.kina"), ("build", "./x.kina"), ("build", "link.kina"), ("build", "hard"),
    ("emit", "x.kina"), ("emit", "./x.kina"), ("emit", "link"),
])
def test_no_command_writes_over_its_source(tmp_path, cmd, output):
    src = tmp_path / "x.kina"
    src.write_text(SOURCE)
    (tmp_path / "link.kina").symlink_to(src)
    (tmp_path / "link").symlink_to(src)
    os.link(src, tmp_path / "hard")
    r = kinac(cmd, "x.kina", "-o", output, cwd=tmp_path)
    _usage_error(r, "refusing to write")
    assert src.read_text() == SOURCE


@pytest.mark.parametrize("name,artifact", [("m.json", "manifest"), ("n.h", "header")])
def test_a_source_named_like_an_artifact_is_not_overwritten(tmp_path, name, artifact):
    src = tmp_path / name
    src.write_text(SOURCE)
    r = kinac("build", name, cwd=tmp_path)
    _usage_error(r, f"refusing to write the {artifact} {name} over the source file {name}", "-o NAME.so")
    assert src.read_text() == SOURCE
    assert not (tmp_path / (Path(name).stem + ".so")).exists()


@pytest.mark.parametrize("output,clash", [("p.h", "header"), ("p.json", "manifest")])
def test_an_output_that_its_own_manifest_or_header_would_replace_is_refused(tmp_path, output, clash):
    """`-o p.h` used to report success and leave no library (the header replaced it)."""
    (tmp_path / "x.kina").write_text(SOURCE)
    r = kinac("build", "x.kina", "-o", output, cwd=tmp_path)
    _usage_error(r, f"the library and the {clash} would both be {output}", "ending in .so")
    assert not (tmp_path / output).exists()


def test_other_bad_outputs(tmp_path):
    (tmp_path / "x.kina").write_text(SOURCE)
    (tmp_path / "other.kina").write_text("// another source\n")
    _usage_error(kinac("build", "x.kina", "-o", "other.kina", cwd=tmp_path), ".kina names Kina source files")
    assert (tmp_path / "other.kina").read_text() == "// another source\n"
    (tmp_path / "d").mkdir()
    _usage_error(kinac("build", "x.kina", "-o", "d", cwd=tmp_path), "it is a directory")


def test_a_good_build_still_writes_all_three(tmp_path):
    (tmp_path / "x.kina").write_text(SOURCE)
    r = kinac("build", "x.kina", "-o", "out/lib", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert all((tmp_path / "out" / n).exists() for n in ("lib", "lib.json", "lib.h"))
    r = kinac("emit", "x.kina", "-o", "x.mlir", cwd=tmp_path)
    assert r.returncode == 0 and "func.func @kina_f" in (tmp_path / "x.mlir").read_text()


def test_run_save_does_not_overwrite_the_source(tmp_path):
    src = tmp_path / "prog.npz"
    src.write_text(SOURCE)
    r = kinac("run", "prog.npz", "--entry", "f", "--save", "prog", cwd=tmp_path)   # np.savez adds .npz
    _usage_error(r, "refusing to write prog.npz over the source file")
    assert src.read_text() == SOURCE


# ---- the validation child ------------------------------------------------------------------
HOSTILE = "open({marker!r}, 'a').write(__name__ + '\\n')\nraise SystemExit('hostile code ran')\n"


def _plant(cwd: Path, marker: Path) -> None:
    for module in ("__init__.py", "oracle/__init__.py", "oracle/validate.py", "oracle/child.py", "backend/__init__.py",
                   "backend/worker_main.py"):   # what the validation child and the -O2 worker import
        (cwd / "compiler" / module).parent.mkdir(parents=True, exist_ok=True)
        (cwd / "compiler" / module).write_text(HOSTILE.format(marker=str(marker)))
    (cwd / "numpy.py").write_text(HOSTILE.format(marker=str(marker)))
    (cwd / "ml_dtypes.py").write_text(HOSTILE.format(marker=str(marker)))


def test_validate_runs_nothing_from_the_working_directory(tmp_path, monkeypatch):
    """Issue 12: `python -m compiler.oracle.validate` in the caller's cwd ran a ./compiler/ or ./numpy.py."""
    work = tmp_path / "workspace"
    work.mkdir()
    marker = tmp_path / "ran.txt"
    _plant(work, marker)
    (work / "prog.kina").write_text(SOURCE)
    monkeypatch.chdir(work)                         # validate_file, as the language server calls it
    report = validate.validate_file("prog.kina")
    assert report.ok, validate.format_report(report)
    assert not marker.exists(), marker.read_text()
    exe = Path(sys.executable).with_name("kinac")
    if exe.exists():                                # the installed command, from the hostile folder
        r = subprocess.run([str(exe), "validate", "prog.kina"], capture_output=True, text=True, cwd=work,
                           timeout=300)
        assert r.returncode == 0 and "1/1 functions passed" in r.stdout, r.stdout + r.stderr
        assert not marker.exists(), marker.read_text()


def test_the_child_command_is_isolated_from_the_cwd(tmp_path):
    cmd, env, cwd = validate._child_command(tmp_path / "lib.so", tmp_path, ["f"])
    assert cmd[1] == "-P" and cwd == str(tmp_path) and env["PYTHONSAFEPATH"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


# ---- --save round-trips every dtype ----------------------------------------------------------------
def _save_program() -> str:
    fns = []
    for d in DType:
        t = f"Tensor[{d}, [5]]"
        body = "x + x" if d.is_float else "x.reshape([5])"       # I64 and Bool have no arithmetic
        fns.append(f"fn f_{d}(x: {t}) -> ({t}, {t}) {{\n  let y = {body} in\n  (y, x)\n}}")
    return "\n".join(fns) + "\n"


@pytest.mark.parametrize("d", list(DType), ids=str)
def test_run_save_round_trips_every_dtype(tmp_path, d):
    (tmp_path / "p.kina").write_text(_save_program())
    r = kinac("run", "p.kina", "--entry", f"f_{d}", "--save", "out.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plain = np.load(tmp_path / "out.npz")                   # NumPy alone reads every entry as numbers
    assert set(plain.files) == {"input_x", "result_0", "result_1", "kina_dtypes"}
    assert plain["result_0"].dtype.kind in "fib"
    loaded = runtime.load_npz(tmp_path / "out.npz")
    assert {k: v.dtype for k, v in loaded.items()} == {k: d.np_dtype for k in ("input_x", "result_0", "result_1")}
    x = loaded["input_x"]
    assert loaded["result_1"].tobytes() == x.tobytes()      # bit for bit
    compute = np.float64 if d is DType.F64 else np.float32    # F64 computes in float64, the rest in float32
    want = (x.astype(compute) * 2).astype(d.np_dtype) if d.is_float else x
    assert loaded["result_0"].tobytes() == want.tobytes()


def test_save_npz_keeps_special_values_bit_for_bit(tmp_path):
    for d in (DType.BF16, DType.F8E4M3, DType.F8E5M2, DType.F16):
        fi = ml_dtypes.finfo(d.np_dtype)
        values = np.array([np.nan, -0.0, float(fi.max), -float(fi.max), float(fi.smallest_subnormal),
                           np.inf if d.has_inf else 0.0]).astype(d.np_dtype)
        path = runtime.save_npz(tmp_path / f"{d}", {"v": values}, {"v": d})
        assert path.name == f"{d}.npz"
        assert runtime.load_npz(path)["v"].tobytes() == values.tobytes()


@pytest.mark.parametrize("name, content", [
    ("lib.json", '{"name": "my-config", "version": 1}\n'),
    ("lib.h", "#pragma once\nint hand_written(void);\n"),
    ("lib.so", "\x7fELF not a Kina library"),
])
def test_build_refuses_to_overwrite_files_kina_did_not_write(tmp_path, name, content):
    """`-o lib.so` over another program's manifest-named JSON, header or library: one line,
    exit 2, nothing written (compiler/outputs.py check_ours)."""
    (tmp_path / "x.kina").write_text(SOURCE)
    (tmp_path / name).write_text(content)
    r = kinac("build", "x.kina", "-o", "lib.so", cwd=tmp_path)
    _usage_error(r, f"refusing to overwrite {name}: it exists and is not a Kina")
    assert (tmp_path / name).read_text() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["x.kina", name])


def test_build_overwrites_its_own_outputs(tmp_path):
    """A rebuild replaces a Kina library, manifest and header; a Kina library whose manifest
    is gone is still recognised by its exports."""
    (tmp_path / "x.kina").write_text(SOURCE)
    assert kinac("build", "x.kina", "-o", "lib.so", cwd=tmp_path).returncode == 0
    assert kinac("build", "x.kina", "-o", "lib.so", cwd=tmp_path).returncode == 0
    (tmp_path / "lib.json").unlink()
    r = kinac("build", "x.kina", "-o", "lib.so", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "lib.json").exists(), r.stderr


def test_tool_errors_at_an_escaped_file_name_map_back_to_the_source():
    """The emitted loc(...) carries plain_name(path) (no newline or quote reaches MLIR);
    a tool's error there still points at the Kina source."""
    from compiler.analysis import analyze
    from compiler.backend.emit.program import emit_program
    from compiler.backend.toolchain import tool_diagnostics
    from compiler.core.diagnostics import SourceText, plain_name
    path = 'a\n"b\udcff*/.kina'
    snap = analyze(SOURCE, path)
    source = SourceText(SOURCE, path)
    mlir = emit_program(snap.program, source).text
    assert "\n// Generated" not in mlir and f'loc("{plain_name(path)}":2:' in mlir
    assert all(ord(c) < 128 for c in mlir) and '"b' not in mlir
    (diag,) = tool_diagnostics("mlir-opt", f"{plain_name(path)}:2:3: error: boom", source)
    assert source.line_col(diag.span.start) == (2, 3) and "boom" in diag.message
