"""The host CPU, read once from /proc/cpuinfo.

-O1..-O3 compile for the CPU this process runs on (llc and opt with -mcpu=native,
compiler/backend/llvm_stage.py), so two things follow the CPU: the build cache's key
(compiler/backend/cache.py `host_fingerprint`: a library built on another CPU is another
entry) and the -O2 register tile (compiler/backend/transform_library.py: 8 x 32 where the
CPU has AVX-512, 4 x 16 where it has AVX2's 16 vector registers).  Both read the CPU here.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

CPUINFO = "/proc/cpuinfo"


@dataclass(frozen=True)
class Cpu:
    """What the back end knows of a CPU."""
    lines: str          # the first `model name` and `flags` (x86) or `Features` (Arm) lines, each with its "\n"
    has_avx512f: bool   # a `flags` line names avx512f


def parse_cpuinfo(text: str) -> Cpu:
    """The Cpu that a /proc/cpuinfo text describes (every core repeats its lines: the first
    core's up to its flags are kept)."""
    kept = ""
    for line in text.splitlines():
        if line.startswith(("flags", "model name", "Features")):
            kept += line + "\n"
            if line.startswith(("flags", "Features")):
                break
    avx512f = any(line.startswith("flags") and " avx512f" in line for line in text.splitlines())
    return Cpu(kept, avx512f)


@functools.cache
def host_cpu(path: str = CPUINFO) -> Cpu:
    """The CPU of this machine (`path`: its cpuinfo); no cpuinfo (not Linux) is a CPU with
    no lines and no AVX-512."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return Cpu("", False)
