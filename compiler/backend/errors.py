"""How the back-end stages fail: `ToolchainError` (a tool is missing or unusable, a setup
problem) and `StageFailed` (a stage rejected its input; compiler/backend/toolchain.py turns it into
diagnostics, mapping `INLINE_LOC_RE` locations back to the Kina source).  Every stage
module raises them; this module imports nothing.
"""
from __future__ import annotations

import re


class ToolchainError(Exception):
    """A tool is missing or unusable; the message says how to fix it."""


class StageFailed(Exception):
    """A stage failed on its input: `tool` and its message, turned into diagnostics."""
    def __init__(self, tool: str, stderr: str):
        super().__init__(stderr)
        self.tool, self.stderr = tool, stderr


# A Kina source location as the emitted MLIR writes it (both back ends map errors through it).
INLINE_LOC_RE = re.compile(r'loc\("(?P<file>[^"]+)":(?P<line>\d+):(?P<col>\d+)\)')
