"""The error of `kinac fmt` (shared by the printer modules and the driver)."""
from __future__ import annotations

from compiler.core.diagnostics import Diagnostic


class FormatError(Exception):
    """The text cannot be formatted: its syntax errors (or an internal check failed)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics or []
