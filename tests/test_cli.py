"""`kinac` as a user runs it: exit codes, the diagnostic format, json, --emit, run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

BROKEN = """fn f(a: Tensor[F32, [2]]) -> Tensor[F32, [2]] {
  let x = a + a
}
fn g(a: Tensor[F32, [2]]) -> Tensor[F32, [3]] {
  a.exp()
}
"""


def kinac(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


@pytest.fixture
def broken(tmp_path):
    p = tmp_path / "broken.kina"
    p.write_text(BROKEN, encoding="utf-8")
    return str(p)


def test_check_reports_errors_with_location_and_caret(broken):
    r = kinac("check", broken)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0] == f"{broken}:3:1: error[syntax]: expected `in` after the let value, found `}}`"
    assert lines[1] == "  }" and lines[2] == "  ^"
    assert any(line.startswith(f"{broken}:5:3: error[return-type]:") for line in lines)
    assert "Traceback" not in r.stderr


def test_check_json(broken):
    r = kinac("check", "--format", "json", broken)
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert [(d["code"], d["line"], d["col"]) for d in report["diagnostics"]] == [("syntax", 3, 1), ("return-type", 5, 3)]


def test_check_clean_file_and_emit_types():
    r = kinac("check", "tests/fixtures/storylm0_forward.kina")
    assert (r.returncode, r.stdout) == (0, "")
    r = kinac("check", "--emit=types", "tests/fixtures/storylm0_forward.kina")
    assert r.returncode == 0
    src = open("tests/fixtures/storylm0_forward.kina", encoding="utf-8").read().splitlines()
    line = next(i for i, text in enumerate(src, 1) if text.startswith("  let probs"))
    want = f"tests/fixtures/storylm0_forward.kina:{line}:7: let probs : Tensor[F32, [1, 2, 4, 4], @host]"
    assert want in r.stdout.splitlines()


def test_emit_grad_prints_the_backward_function():
    r = kinac("check", "--emit=grad", "examples/ad_reshape.kina")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ".rev(" in r.stdout and "reshape(" in r.stdout and r.stdout.lstrip().startswith("fn ")


def test_run_entry_prints_shape():
    r = kinac("run", "tests/fixtures/storylm0_forward.kina", "--entry", "storylm0_forward")
    assert r.returncode == 0, r.stderr
    assert "storylm0_forward result: shape [1, 4, 8] dtype float32" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["check", "does/not/exist.kina"], "cannot read does/not/exist.kina"),
    (["build", "does/not/exist.kina"], "cannot read does/not/exist.kina"),
    (["emit", "does/not/exist.kina"], "cannot read does/not/exist.kina"),
    (["validate", "does/not/exist.kina"], "cannot read does/not/exist.kina"),
    (["build", "examples/ad_gather.kina", "-o", "/proc/no/such/dir/lib.so"], "cannot write /proc/no/such/dir/lib.so"),
    (["run", "tests/fixtures/storylm0_forward.kina", "--entry", "nope"], "no function `nope`"),
])
def test_usage_errors_are_one_line_exit_2(args, message):
    r = kinac(*args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_bad_utf8_is_a_clear_error(tmp_path):
    p = tmp_path / "bin.kina"
    p.write_bytes(b"fn \xff\xfe")
    r = kinac("check", str(p))
    assert r.returncode == 2 and "not UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_run_refuses_a_program_with_errors(broken):
    r = kinac("run", broken)
    assert r.returncode == 1 and "error[syntax]" in r.stdout


def _plain_numpy_storylm0(ids, w):
    """StoryLM-0's forward graph written independently in plain NumPy (float64)."""
    T, H, Dh = 4, 2, 2
    x = w["emb"][ids[0]].astype(np.float64)                     # [T, D]
    def heads(a):                                               # [T, D] -> [H, T, Dh]
        return a.reshape(T, H, Dh).transpose(1, 0, 2)
    q, k, v = heads(x @ w["wq"]), heads(x @ w["wk"]), heads(x @ w["wv"])
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(Dh)
    scores = np.where(np.tril(np.ones((T, T))) > 0, scores, -1e4)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    attn = (p @ v).transpose(1, 0, 2).reshape(T, H * Dh)
    return ((x + attn @ w["wo"]) @ w["lm_head"])[None]


def test_run_main_prints_the_logits_of_an_independent_numpy_model(tmp_path):
    out = tmp_path / "run.npz"
    r = kinac("run", "tests/fixtures/storylm0_forward.kina", "--save", str(out))
    assert r.returncode == 0, r.stderr
    assert "main result: shape [1, 4, 8] dtype float32" in r.stdout
    weights = dict(np.load(ROOT / "examples" / "storylm0_weights.npz"))
    want = _plain_numpy_storylm0(np.array([[1, 4, 2, 6]]), weights)
    got = np.load(out)["result_0"]
    assert got.shape == (1, 4, 8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the printed text is the same array
    printed = r.stdout.split("main result: shape [1, 4, 8] dtype float32\n", 1)[1]
    values = np.array([float(t) for t in printed.replace("[", " ").replace("]", " ").split()])
    np.testing.assert_allclose(values.reshape(1, 4, 8), want, atol=2e-6)


def test_output_piped_into_a_closed_reader_is_no_traceback():
    cmd = f"{sys.executable} -m compiler.cli run tests/fixtures/storylm0_forward.kina --entry storylm0_forward | head -n 1"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.stdout.startswith("input token_ids") and "Traceback" not in r.stderr


def test_a_tensor_too_large_for_the_machine_is_a_clear_error(tmp_path):
    src = tmp_path / "huge.kina"
    src.write_text("fn main() -> Tensor[F32, [99999999, 9999999]] {\n"
                   "  Tensor[F32, [99999999, 9999999]] {}\n}\n")
    run = kinac("run", str(src))
    assert run.returncode == 1 and "out of memory" in run.stderr and "Traceback" not in run.stderr
    build = kinac("build", str(src), "-o", str(tmp_path / "huge.so"))
    assert build.returncode == 1 and "error[emit]" in build.stdout + build.stderr
    assert "the host backend limits one tensor to 16 GiB" in build.stdout + build.stderr


# ---- file names (the defects issue: "File names") --------------------------------------------
GOOD = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x + x\n}\n"
# Names no command may choke on: a byte that is not UTF-8, line breaks, the end of a C
# comment (a folder `x*`), quotes, spaces, and a name that spells a diagnostic of its own.
ODD_NAMES = [b"a\xffb.kina", b"a\nb.kina", b"a\rb.kina", b"x*/y.kina", b"q\"uo'te.kina",
             b"with space.kina", b"x\nerror: fake.kina"]


def kinac_bytes(*args: bytes | str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """kinac with byte arguments; its output must be UTF-8 (decoded strictly by the caller)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], capture_output=True, env=env,
                          cwd=cwd, timeout=300)


def _odd_file(tmp_path: Path, name: bytes, text: str) -> bytes:
    path = os.path.join(os.fsencode(tmp_path), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(text.encode())
    return name


@pytest.mark.parametrize("name", ODD_NAMES, ids=lambda n: repr(n)[2:-1])
def test_check_build_and_validate_take_any_file_name(tmp_path, name):
    """Each command succeeds with its usual output, no traceback, and prints the name escaped
    (one line per message); the C header of a `*/` name compiles."""
    from compiler.core.diagnostics import display_path
    arg = _odd_file(tmp_path, name, GOOD)
    shown = display_path(os.fsdecode(name))
    check = kinac_bytes("check", arg, cwd=tmp_path)
    assert check.returncode == 0 and check.stdout == check.stderr == b"", check.stderr
    build = kinac_bytes("build", arg, cwd=tmp_path)
    out, err = build.stdout.decode("utf-8"), build.stderr.decode("utf-8")
    assert build.returncode == 0 and err == "" and out.count("\n") == 1 and out.startswith("wrote "), out + err
    assert shown[:-len('.kina"')] in out if shown.startswith('"') else shown[:-5] in out
    header = os.path.join(os.fsencode(tmp_path), name[:-5] + b".h")
    main_c = tmp_path / "main.c"
    main_c.write_text('#include "lib.h"\nint main(void) { return 0; }\n')
    Path(tmp_path / "lib.h").write_bytes(open(header, "rb").read())
    cc = subprocess.run(["cc", "-c", str(main_c), "-o", str(tmp_path / "main.o")], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    validate = kinac_bytes("validate", arg, cwd=tmp_path)
    out = validate.stdout.decode("utf-8")
    assert validate.returncode == 0 and validate.stderr == b"" and "1/1 functions passed" in out, out


@pytest.mark.parametrize("name", ODD_NAMES, ids=lambda n: repr(n)[2:-1])
def test_diagnostics_print_file_names_escaped(tmp_path, name):
    """A diagnostic's location is the escaped name on one line: a crafted name cannot print
    a fake `error:` line, nor a line break, nor make printing fail (a non-UTF-8 byte)."""
    from compiler.core.diagnostics import display_path
    arg = _odd_file(tmp_path, name, "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x +\n}\n")
    for command in ("check", "build", "validate"):
        r = kinac_bytes(command, arg, cwd=tmp_path)
        out, err = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
        assert r.returncode == 1 and "Traceback" not in err, err
        lines = (out + err).splitlines()
        assert lines[0].startswith(display_path(os.fsdecode(name)) + ":3:1: error[syntax]:"), lines
        assert not any(line.startswith("error") for line in lines), lines
        assert lines[-1].startswith(f"kina{'c' if command == 'check' else 'c ' + command}"), lines


def test_an_unreadable_odd_name_is_one_escaped_line(tmp_path):
    r = kinac_bytes("check", b"no\nsuch\xff.kina", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.decode("utf-8") == \
        'kinac: error: cannot read "no\\nsuch\\xff.kina": No such file or directory\n'


def test_a_byte_order_mark_is_skipped_by_every_command(tmp_path):
    """A UTF-8 BOM at the start of a file is no syntax error (as in Python and rustc), and
    columns are counted after it (what an editor shows)."""
    src = tmp_path / "bom.kina"
    src.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert kinac("check", str(src)).returncode == 0
    assert kinac("run", str(src), "--entry", "f").returncode == 0
    build = kinac("build", str(src))
    assert build.returncode == 0, build.stderr
    src.write_bytes(b"\xef\xbb\xbffn f(x: Tensor[F32, [2]], x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n")
    r = kinac("check", str(src))
    assert r.returncode == 1 and r.stdout.startswith(f"{src}:1:27: error[duplicate]"), r.stdout


def test_run_of_a_tensor_larger_than_the_address_space_is_out_of_memory(tmp_path):
    """NumPy raises ValueError (not MemoryError) past the address space: still a one-line error."""
    src = tmp_path / "huge.kina"
    shape = "[999999999999, 9999999999]"
    src.write_text(f"fn main() -> Tensor[F32, {shape}] {{\n  Tensor[F32, {shape}] {{}}\n}}\n"
                   f"fn f(x: Tensor[F32, {shape}]) -> Tensor[F32, {shape}] {{\n  x\n}}\n")
    for args in ((), ("--entry", "f")):
        r = kinac("run", str(src), *args)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1 and "out of memory" in r.stderr and "more than this machine" in r.stderr
