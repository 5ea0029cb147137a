"""The child process `kinac validate` runs a compiled library in, and its protocol.

Any crash of compiled code (a failed bounds check is a cf.assert trap that aborts) must not
take the caller down: `run_in_child` runs the functions of a library in ONE child process
(`python -m compiler.oracle.child --child SO WORK NAMES...`, which is `child_main`: it
imports the runtime and NumPy, not the compiler),
each on inputs pickled by `write_inputs`; the child answers one START / DONE / RAISED line
per function and pickles the results (`load_outputs`).  A crash is reported on the function
that was running, naming what the child printed, and a new child runs the remaining
functions.  Used by validate, the differential oracle and the dynamic fuzzer.
"""
from __future__ import annotations

import os
import pickle
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from compiler.runtime.arrays import Array

if TYPE_CHECKING:
    from compiler.oracle.interp import Value

RUN_MARK = "@"   # `train_step@1`: run 1 of a dynamic function (its sizes are pickled with its inputs)
# The module whose `--child` entry runs child_main (its name is what `ps` shows).
ENTRY = "compiler.oracle.child"


def flat(value: Value) -> list[Array]:
    """A function's result as a list of arrays (a tensor, or a flat tuple of tensors)."""
    out: list[Array] = []
    for a in value if isinstance(value, tuple) else (value,):
        assert isinstance(a, np.ndarray), type(a)   # exported results are never nested tuples
        out.append(a)
    return out


def write_inputs(work: Path, key: str, args: list[Array], sizes: Mapping[str, int] | None = None) -> None:
    """The inputs (and a dynamic function's sizes, passed as keywords) of run `key` for
    child_main."""
    with open(work / f"{key}.in.pkl", "wb") as f:
        pickle.dump((args, dict(sizes or {})), f)


def load_outputs(work: Path, key: str) -> list[Array]:
    """The results the child process computed for run `key` (child_main's pickle)."""
    with open(work / f"{key}.out.pkl", "rb") as f:
        out: list[Array] = pickle.load(f)
    return out


def child_main(so_path: str, work: str, names: list[str]) -> int:
    """Run functions of the library on pickled inputs; one START/DONE line per function."""
    from compiler import runtime
    proto = _route_c_stdout_to_stderr()
    lib = runtime.load(so_path)
    for name in names:
        print(f"START {name}", file=proto, flush=True)
        with open(Path(work) / f"{name}.in.pkl", "rb") as f:
            args, sizes = pickle.load(f)
        try:
            out = flat(lib[name.partition(RUN_MARK)[0]](*args, **sizes))
        except Exception as e:   # the runtime refused the call (e.g. an index out of range)
            message = " ".join(f"{type(e).__name__}: {e}".split())
            print(f"RAISED {name} {message}", file=proto, flush=True)
            continue
        with open(Path(work) / f"{name}.out.pkl", "wb") as f:
            pickle.dump(out, f)
        print(f"DONE {name}", file=proto, flush=True)
    return 0


def _route_c_stdout_to_stderr() -> TextIO:
    """cf.assert prints its message with puts() and then aborts: on a pipe that message
    would sit in stdio's buffer and die with the process.  Keep the protocol on a private
    copy of fd 1, point fd 1 at stderr, and make C's stdout unbuffered."""
    import ctypes
    proto = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    libc = ctypes.CDLL(None)
    try:
        c_stdout = ctypes.c_void_p.in_dll(libc, "stdout")
        libc.setvbuf(c_stdout, None, 2, 0)   # 2 = _IONBF
    except (ValueError, AttributeError):    # not glibc: the message may then be lost, the crash is not
        pass
    return proto


def _assertion(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    hits = [line for line in lines if "out of bounds" in line or "assert" in line.lower()]
    return (hits or lines or ["the library crashed without a message"])[0]


def child_command(so_path: Path, work: Path, names: list[str]) -> tuple[list[str], dict[str, str], str]:
    """(argv, environment, working directory) of the child.  It must import this very `compiler` package and
    nothing from the caller's working directory or workspace (a `./compiler/` or `./numpy.py`
    there would run): `-P` (and PYTHONSAFEPATH for anything it starts) keeps the working
    directory off sys.path, the working directory is the private work dir, and the
    directory holding this package is put first on PYTHONPATH, made absolute."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONSAFEPATH="1",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-P", "-m", ENTRY, "--child", str(Path(so_path).resolve()),
           str(Path(work).resolve()), *names]
    return cmd, env, str(work)


def run_in_child(so_path: Path, work: Path, names: list[str], *, timeout: float,
                 cancel: Callable[[], bool] | None, on_done: Callable[[str, str | None], None],
                 idle: Callable[[], bool] | None = None) -> bool:
    """Run `names` in child processes, restarting after a crash.  on_done(name, error|None)
    is called per function; idle(), while the child has nothing to report, does a piece of
    the caller's own work (False: none left).  Returns False when cancelled."""
    pending = list(names)
    while pending:
        cmd, env, cwd = child_command(so_path, work, pending)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        assert proc.stdout is not None and proc.stderr is not None     # both are pipes
        current, deadline, timed_out = None, time.monotonic() + timeout, False
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            if cancel is not None and cancel():
                proc.kill()
                proc.wait()
                proc.stdout.close()
                proc.stderr.close()
                return False
            if time.monotonic() > deadline:
                timed_out = True
                proc.kill()
                break
            if not sel.select(0.0 if idle is not None else 0.1):
                began = time.monotonic()
                if idle is None or not idle():
                    idle = None     # nothing (left) to do meanwhile: wait for the child
                deadline += time.monotonic() - began   # the caller's work is not the child's time
                continue
            line = proc.stdout.readline()
            if not line:
                break
            kind, _, name = line.strip().partition(" ")
            if kind == "START":
                current = name
            elif kind == "DONE":
                pending.remove(name)
                on_done(name, None)
                current = None
            elif kind == "RAISED":
                name, _, message = name.partition(" ")
                pending.remove(name)
                on_done(name, f"call raised {message}")
                current = None
        sel.close()
        stderr = proc.stderr.read()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if current is None and pending:
            current = pending[0]          # died before starting (e.g. the library fails to load)
        if current is not None and current in pending:
            pending.remove(current)
            msg = (f"timed out after {timeout:.0f} s" if timed_out else
                   f"crashed (exit {proc.returncode}): {_assertion(stderr)}")
            on_done(current, msg)
    return True


if __name__ == "__main__":
    if sys.argv[1:2] != ["--child"]:
        sys.exit("usage: python -m compiler.oracle.child --child SO WORK NAMES...")
    so, work_dir, *functions = sys.argv[2:]
    sys.exit(child_main(so, work_dir, functions))
