"""Types of the C call helper (compiler/_fastcall.c), for the type checker."""
from typing import Any

class Entry:
    def __init__(self, fnptr: int | None, template: Any, slots: tuple[Any, ...], array_type: type) -> None: ...

def call(entry: Entry, arrays: tuple[Any, ...]) -> int: ...
