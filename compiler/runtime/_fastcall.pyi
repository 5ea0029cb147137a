"""Types of the C call helper (compiler/runtime/_fastcall.c), for the type checker."""
from typing import Any

RELEASE_GIL_BYTES: int

class Entry:
    def __init__(self, fnptr: int | None, template: Any, slots: tuple[Any, ...], array_type: type,
                 extra: tuple[int, ...] = ...) -> None: ...

def call(entry: Entry, arrays: tuple[Any, ...]) -> int: ...
