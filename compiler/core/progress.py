"""A one-line progress indicator for long commands on a terminal.

`Ticker(stream)` as a context manager: once the work has taken `delay` seconds (2 by
default) it shows `<what> <elapsed> s` on one line of `stream`, rewritten in place every
`period` seconds, and erases it at the end, so a short command prints nothing and
nothing is left behind.  Only when `stream` is a terminal: piped or redirected output (CI
logs, tests, an editor) never sees it.  `update(what)` changes the text, from any thread.
"""
from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import TextIO

DELAY = 2.0      # seconds before anything is shown
PERIOD = 0.25    # seconds between redraws


class Ticker:
    def __init__(self, stream: TextIO, what: str, delay: float = DELAY, period: float = PERIOD) -> None:
        self.stream, self.what, self.delay, self.period = stream, what, delay, period
        self.enabled = _is_terminal(stream)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._shown = 0        # width of the line on screen
        self._start = time.monotonic()
        self._thread: threading.Thread | None = None

    def update(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> Ticker:
        self._start = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="kinac-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._erase()

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            self._draw(f"{self.what} {time.monotonic() - self._start:.1f} s")
            self._stop.wait(self.period)

    def _draw(self, line: str) -> None:
        with self._lock:
            pad = " " * max(0, self._shown - len(line))
            self.stream.write("\r" + line + pad)
            self.stream.flush()
            self._shown = len(line)

    def _erase(self) -> None:
        with self._lock:
            if self._shown:
                self.stream.write("\r" + " " * self._shown + "\r")
                self.stream.flush()
                self._shown = 0


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):    # a closed or exotic stream
        return False
