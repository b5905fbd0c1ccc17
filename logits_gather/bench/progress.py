"""A progress bar on stderr for rank 0: tqdm when installed, else one line per step."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any


class Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.done, self.text = total, enabled, 0, ""
        self._bar: Any = None
        self._t0 = time.monotonic()
        if enabled:
            try:
                from tqdm import tqdm

                # a thread lock: tqdm's default multiprocessing lock is a named semaphore,
                # reported as leaked when a failing rank exits without cleanup
                tqdm.set_lock(threading.RLock())
                self._bar = tqdm(
                    total=total, file=sys.stderr, desc="bench", unit="step", dynamic_ncols=True
                )
            except ImportError:
                print(f"[bench] {total} steps (install tqdm for a progress bar)", file=sys.stderr)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()

    def label(self, text: str) -> None:
        self.text = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def step(self) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(1)
        elif self.enabled:
            elapsed = time.monotonic() - self._t0
            print(
                f"[bench] {self.done}/{self.total} {self.text} ({elapsed:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
