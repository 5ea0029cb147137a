"""Programs in more than one file: `import`, qualified calls, the module loader, import
diagnostics, and the build of a three-file workspace (tests/fixtures/imports: model.kina
imports layers.kina and optim.kina), which trains exactly like the same program in one file."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from compiler import analysis, build
from compiler.cli import main as kinac
from compiler.format import format_source
from compiler.modules.workspace import Workspace
from compiler.oracle import interp

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
STEPS = 5


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _check(path: Path) -> analysis.Snapshot:
    return analysis.analyze(path.read_text(), str(path))


def _at(snap: analysis.Snapshot, code: str) -> tuple[str, str]:
    """(the message, the text under the span) of the one diagnostic with `code`."""
    found = [d for d in snap.diagnostics if d.code == code]
    assert len(found) == 1, [(d.code, d.message) for d in snap.diagnostics]
    d = found[0]
    return d.message, snap.text[d.span.start:d.span.end]


def one_file_program() -> str:
    """The workspace as one file: the modules' functions, then the model's, unqualified."""
    parts = [(FIXTURES / n).read_text() for n in ("layers.kina", "optim.kina", "model.kina")]
    text = "\n".join(parts)
    text = re.sub(r"(?m)^import .*$", "", text)
    return text.replace("layers.", "").replace("optim.", "")


FN = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x }\n"
PRIVATE = "fn _g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x }\n"


# ---- the front end ---------------------------------------------------------------------------
def test_the_workspace_checks_and_links():
    snap = _check(FIXTURES / "model.kina")
    assert [d for d in snap.diagnostics if d.severity == "error"] == []
    assert [(m.decl.name, Path(m.path).name) for m in snap.imports] == [("layers", "layers.kina"),
                                                                       ("optim", "optim.kina")]
    program = snap.program_for({})[0]
    names = set(program.functions)
    # the entry file's functions keep their names (exports); imported ones are named after
    # their module, never exported; `predict` is dynamic and calls a dynamic copy of mlp
    assert {"train_step", "predict", "first_layer"} <= names
    assert {"layers.mlp_loss$4_3_8_2", "optim.sgd$3_8", "layers.linear$4_3_8", "layers.mlp$dyn"} <= names
    assert program.functions["predict"].sizes == ("B",)
    assert all("." in n or "$" in n for n in names - {"train_step", "predict", "first_layer"})


def test_the_workspace_runs_like_one_file():
    linked = _check(FIXTURES / "model.kina").program
    single = analysis.analyze(one_file_program()).program
    fn = linked.functions["train_step"]
    args = interp.random_inputs(fn, seed=3)
    got, want = interp.run_function(linked, "train_step", args), interp.run_function(single, "train_step", args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_the_pytorch_reference_runs_the_linked_program():
    torch_ref = pytest.importorskip("compiler.oracle.torch_ref")
    if not torch_ref.available():
        pytest.skip("PyTorch is optional")
    linked = _check(FIXTURES / "model.kina").program
    args = interp.random_inputs(linked.functions["train_step"], seed=1)
    for got, want in zip(torch_ref.run_function(linked, "train_step", args),
                         interp.run_function(linked, "train_step", args)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_qualified_call_forms_and_hover_names():
    snap = _check(FIXTURES / "model.kina")
    calls = {f.name for f in snap.types if f.kind in ("call", "handle")}
    assert "layers.linear[M=4, K=3, N=8]" in calls
    assert any(n.startswith("layers.mlp_loss[") for n in calls)
    assert any(n.startswith("optim.sgd[") for n in calls)


def test_missing_module_says_where_it_looked(tmp_path):
    root = _write(tmp_path, {"m.kina": "import nowhere\n" + FN})
    message, text = _at(_check(root / "m.kina"), "import")
    assert text == "nowhere"
    assert "no module `nowhere`" in message and str(tmp_path) in message and "standard library" in message


def test_a_call_through_a_name_nothing_imports_is_one_diagnostic(tmp_path):
    """`import optimm` (a typo) then `optim.sgd(x)`: besides the import's own error, one
    diagnostic at `optim` naming the close import, not an unknown name and an unknown op."""
    body = "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  let y = optim.sgd(x) in\n  y\n}\n"
    root = _write(tmp_path, {"m.kina": "import optimm\n" + body})
    snap = _check(root / "m.kina")
    assert [d.code for d in snap.diagnostics] == ["import", "unknown-name"], snap.diagnostics
    message, text = _at(snap, "unknown-name")
    assert text == "optim" and "neither a name in scope nor an imported module" in message
    assert [n.message for n in snap.diagnostics[1].notes] == [
        "did you mean `optimm`?", "`optim` is a module of the standard library: add `import optim` at the top of the file"]


def test_missing_path_import(tmp_path):
    root = _write(tmp_path, {"m.kina": 'import "sub/none.kina" as n\n' + FN})
    message, text = _at(_check(root / "m.kina"), "import")
    assert text == 'import "sub/none.kina" as n' and "sub/none.kina" in message


def test_cycle_names_its_path(tmp_path):
    root = _write(tmp_path, {"a.kina": "import b\n" + FN, "b.kina": "import c\n" + FN, "c.kina": "import a\n" + FN})
    message, text = _at(_check(root / "a.kina"), "import-cycle")
    assert message == "import cycle: a.kina -> b.kina -> c.kina -> a.kina" and text == "import b"


def test_a_file_importing_itself_is_a_cycle(tmp_path):
    root = _write(tmp_path, {"a.kina": "import a\n" + FN})
    assert _at(_check(root / "a.kina"), "import-cycle") == ("import cycle: a.kina -> a.kina", "import a")


def test_missing_name_with_a_hint(tmp_path):
    root = _write(tmp_path, {"lib.kina": FN, "m.kina": "import lib\nfn h(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] "
                                                       "{ lib.ff(x) }\n"})
    snap = _check(root / "m.kina")
    message, text = _at(snap, "unknown-name")
    assert message == "module `lib` has no function `ff`" and text == "lib.ff"
    d = next(d for d in snap.diagnostics if d.code == "unknown-name")
    assert [n.message for n in d.notes] == ["did you mean `lib.f`?"]


def test_private_name(tmp_path):
    root = _write(tmp_path, {"lib.kina": FN + PRIVATE,
                             "m.kina": "import lib\nfn h(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { lib._g(x) }\n"})
    message, text = _at(_check(root / "m.kina"), "private")
    assert "`_g` is private to module `lib`" in message and text == "lib._g"


def test_two_imports_under_one_name(tmp_path):
    root = _write(tmp_path, {"lib.kina": FN, "other.kina": FN,
                             "m.kina": "import lib\nimport other as lib\n" + FN})
    snap = _check(root / "m.kina")
    message, text = _at(snap, "duplicate")
    assert "two imports are named `lib`" in message and text == "lib"
    d = next(d for d in snap.diagnostics if d.code == "duplicate")
    assert d.span.start == snap.text.index("as lib") + 3


def test_errors_inside_an_imported_module(tmp_path, capsys):
    root = _write(tmp_path, {"lib.kina": "fn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x + q }\n"
                                         "fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x.foo() }\n",
                             "m.kina": "import lib\n" + FN})
    message, text = _at(_check(root / "m.kina"), "import")
    assert message == "module lib has 2 errors" and text == "import lib"
    assert kinac(["check", str(root / "m.kina")]) == 1
    out = capsys.readouterr().out
    assert "m.kina:1:1: error[import]: module lib has 2 errors" in out
    assert "lib.kina:1:53: error[unknown-name]: unknown name `q`" in out   # the module's own, with its path


def test_import_after_a_function_and_a_malformed_import(tmp_path):
    root = _write(tmp_path, {"m.kina": "import \"x.kina\"\n" + FN + "import late\n"})
    snap = _check(root / "m.kina")
    messages = sorted(d.message for d in snap.diagnostics if d.code == "syntax")
    assert messages == ['an import of a path needs a name: `import "x.kina" as NAME`',
                        "imports come at the top of a file, before its first function"]


def test_a_local_name_is_not_a_module(tmp_path):
    """A parameter named like an import is the parameter: `layers.exp()` is the op."""
    root = _write(tmp_path, {"layers.kina": FN, "m.kina": "import layers\n"
                             "fn h(layers: Tensor[F32, [2]]) -> Tensor[F32, [2]] { layers.exp() }\n"})
    assert _check(root / "m.kina").diagnostics == []


def test_kina_path_and_local_shadowing(tmp_path, monkeypatch):
    lib = _write(tmp_path / "lib", {"util.kina": FN})
    app = _write(tmp_path / "app", {"m.kina": "import util\n" + FN})
    assert _at(_check(app / "m.kina"), "import")[1] == "util"
    monkeypatch.setenv("KINA_PATH", f"{tmp_path / 'nothing'}:{lib}")
    snap = _check(app / "m.kina")
    assert snap.diagnostics == [] and snap.imports[0].path == str(lib / "util.kina")
    (app / "util.kina").write_text(FN)              # the importing file's folder comes first
    assert _check(app / "m.kina").imports[0].path == str(app / "util.kina")


def test_the_workspace_reanalyses_only_what_changed(tmp_path):
    root = _write(tmp_path, {"a.kina": FN, "b.kina": "import a\n" + FN, "c.kina": FN})
    texts: dict[str, str] = {}
    ws = Workspace(analysis.Analysis, read=lambda p: texts.get(p) or Path(p).read_text())
    first = ws.analyse(str(root / "b.kina"))
    assert first is not None and ws.analyse(str(root / "b.kina")) is first     # nothing changed
    assert ws.importers_of(str(root / "a.kina")) == [str(root / "b.kina")]
    texts[str(root / "a.kina")] = FN.replace("{ x }", "{ x.exp() }")           # an open editor's buffer
    second = ws.analyse(str(root / "b.kina"))
    assert second is not first and second.imports[0].snapshot.text == texts[str(root / "a.kina")]


# ---- kinac fmt -------------------------------------------------------------------------------
def test_fmt_import_lines():
    text = ('// top\nimport   layers   // the layers\n\n\n// opt\nimport "x/optim.kina"    as   opt\n'
            "import nn as nn\nimport nn as net\n" + FN)
    want = ('// top\nimport layers // the layers\n\n// opt\nimport "x/optim.kina" as opt\nimport nn\n'
            "import nn as net\n\nfn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] {\n  x\n}\n")
    assert format_source(text) == want
    assert format_source(want) == want
    for name in ("model.kina", "layers.kina", "optim.kina"):
        text = (FIXTURES / name).read_text()
        assert format_source(text) == text, name


def test_fmt_refuses_a_misplaced_import(tmp_path, capsys):
    path = _write(tmp_path, {"m.kina": FN + "import late\n"}) / "m.kina"
    assert kinac(["fmt", str(path)]) == 1
    cap = capsys.readouterr()
    assert "imports come at the top of a file" in cap.err + cap.out


# ---- the build -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("imports") / "model.so"
    result = build.build_file(FIXTURES / "model.kina", out)     # KINA_OPT_LEVEL: -O0, and -O2 in CI's second pass
    assert result.ok, [d.message for d in result.diagnostics]
    from compiler.runtime.library import load
    return result, load(str(out))


def test_the_library_exports_the_entry_file_only(built):
    result, _ = built
    manifest = json.loads(result.manifest_path.read_text())
    assert sorted(f["name"] for f in manifest["functions"]) == ["first_layer", "predict", "train_step"]
    files = {Path(f["path"]).name: f["sha256"] for f in manifest["files"]}
    assert sorted(files) == ["layers.kina", "model.kina", "optim.kina"]
    import hashlib
    assert files["optim.kina"] == hashlib.sha256((FIXTURES / "optim.kina").read_bytes()).hexdigest()


def test_the_library_trains_like_one_file(built):
    _, lib = built
    single = analysis.analyze(one_file_program()).program
    rng = np.random.default_rng(0)
    x, t = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)
    w = [rng.normal(size=(3, 8)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)]
    ref = list(w)
    losses = []
    for _ in range(STEPS):
        loss, *w = lib.train_step(x, t, *w)
        want_loss, *ref = interp.run_function(single, "train_step", [x, t, *ref])
        np.testing.assert_allclose(loss, want_loss, rtol=1e-4, atol=1e-5)
        for a, b in zip(w, ref):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        losses.append(float(loss[0, 0]))
    assert losses[-1] < losses[0]
    y = lib.predict(rng.normal(size=(5, 3)).astype(np.float32), *w)     # dynamic: any batch
    assert y.shape == (5, 2)


def test_validate(capsys):
    assert kinac(["validate", str(FIXTURES / "model.kina")]) == 0     # at KINA_OPT_LEVEL, like `built`
    out = capsys.readouterr().out
    assert "PASS train_step" in out and "PASS predict[B=" in out


def test_editing_an_imported_file_rebuilds_its_importer(tmp_path, monkeypatch):
    monkeypatch.setenv("KINA_CACHE", "1")
    monkeypatch.setenv("KINA_CACHE_DIR", str(tmp_path / "cache"))
    root = _write(tmp_path / "src", {"lib.kina": "fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x * 2.0 }\n",
                                     "m.kina": "import lib\nfn f(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] "
                                               "{ lib.g(x) }\n"})
    first = build.build_file(root / "m.kina", tmp_path / "a.so", opt_level=0)
    again = build.build_file(root / "m.kina", tmp_path / "b.so", opt_level=0)
    assert first.ok and not first.cached and again.ok and again.cached
    (root / "lib.kina").write_text("fn g(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x * 3.0 }\n")
    edited = build.build_file(root / "m.kina", tmp_path / "c.so", opt_level=0)
    assert edited.ok and not edited.cached
    from compiler.runtime.library import load
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(load(str(tmp_path / "c.so")).f(x), 3 * x)


def test_a_reverse_mode_error_inside_an_imported_function(tmp_path):
    """Reported at the importer's handle, with the file and line where it is."""
    root = _write(tmp_path, {"lib.kina": "fn bad(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] { x.exp().relu() }\n",
                             "m.kina": "import lib\nfn f(x: Tensor[F32, [2]]) -> (Tensor[F32, [2]], Tensor[F32, [2]]) "
                                       "{ handle lib.bad(x) with reverseMode }\n"})
    message, text = _at(_check(root / "m.kina"), "ad-structure")
    assert text == "lib.bad" and message.endswith(f"(in {root / 'lib.kina'}:1:51)")


def test_a_standard_module_used_without_its_import(tmp_path):
    """`nn.linear(..)` in a file that does not `import nn` (whether it imports nothing or other
    modules): one diagnostic per call, at `nn`, with a note that says which import to add;
    not an unknown name and an unknown op."""
    body = ("fn f(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]], b: Tensor[F32, [4]]) -> Tensor[F32, [2, 4]] "
            "{ let y = nn.linear(x, w, b) in y }\n")
    root = _write(tmp_path, {"alone.kina": body, "lib.kina": FN, "other.kina": "import lib\n" + body})
    for name in ("alone.kina", "other.kina"):
        snap = _check(root / name)
        message, text = _at(snap, "unknown-name")
        assert text == "nn" and message.startswith("`nn` is neither a name in scope nor an imported module")
        d = next(d for d in snap.diagnostics if d.code == "unknown-name")
        assert [n.message for n in d.notes] == ["`nn` is a module of the standard library: add `import nn` at the "
                                                "top of the file"]
        assert len(snap.diagnostics) == 1, [x.message for x in snap.diagnostics]


def test_a_shape_error_in_a_generic_callee_under_reverse_mode(tmp_path):
    """The call of a callee that did not check says that the callee has errors (not only
    "cannot be inlined"), in the name and sizes the user wrote; the cause is reported too."""
    root = _write(tmp_path, {
        "blocks.kina": "fn lin[M, K, N](x: Tensor[F32, [M, K]], w: Tensor[F32, [K, N]]) -> Tensor[F32, [M, N]] "
                       "{ let y = w @ x in y }\n",
        "m.kina": "import blocks\nfn loss(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]]) -> Tensor[F32, [2, 4]] "
                  "{ let y = blocks.lin(x, w) in y }\n"
                  "fn g(x: Tensor[F32, [2, 3]], w: Tensor[F32, [3, 4]]) -> Tensor[F32, [3, 4]] "
                  "{ let (y, gx, gw) = handle loss(x, w) with reverseMode in gw }\n"})
    snap = _check(root / "m.kina")
    message, text = _at(snap, "ad-structure")
    assert text == "blocks.lin(x, w)"
    assert message.startswith("reverseMode cannot differentiate through `blocks.lin` at sizes 2, 3, 4: "
                              "that function has errors")
    assert "shape" in [d.code for d in snap.diagnostics] or "import" in [d.code for d in snap.diagnostics]


def test_an_importer_sees_its_imports_change(tmp_path):
    """The incremental analysis of an importer (the language server's) follows edits of the
    modules it imports: a changed signature re-checks its callers, a new function resolves
    a call that was an error; each result equals a fresh analysis."""
    root = _write(tmp_path, {"lib.kina": FN, "m.kina": "import lib\nfn h(x: Tensor[F32, [2]]) -> Tensor[F32, [2]] "
                                                       "{ lib.g(lib.f(x)) }\n"})
    lib, text = str(root / "lib.kina"), (root / "m.kina").read_text()
    buffers: dict[str, str] = {}
    ws = Workspace(analysis.Analysis, read=lambda p: buffers.get(p) or Path(p).read_text())
    live = analysis.Analysis(str(root / "m.kina"), ws.loader)

    def codes() -> list[str]:
        snap = live.update(text)
        fresh = analysis.analyze(text, str(root / "m.kina"), ws.loader)
        assert [(d.code, d.message, d.span) for d in snap.diagnostics] == \
            [(d.code, d.message, d.span) for d in fresh.diagnostics]
        return [d.code for d in snap.diagnostics]
    assert codes() == ["unknown-name"]                       # lib has no g
    buffers[lib] = FN + FN.replace("fn f", "fn g")
    assert codes() == []
    buffers[lib] = FN.replace("[2]", "[3]") + FN.replace("fn f", "fn g")
    assert codes() == ["shape", "shape"]                     # f now takes and gives [3]; g takes [2]
