"""A wall clock the test moves, for one process: libfaketime (Debian's ``faketime``).

``FakeClock(path).env`` preloads libfaketime with ``FAKETIME_TIMESTAMP_FILE`` pointing at
a file the test rewrites (``jump``); ``FAKETIME_NO_CACHE`` makes every clock read see the
new offset at once, so a running process's wall clock jumps when the file changes.
Monotonic time is left alone (``FAKETIME_DONT_FAKE_MONOTONIC``): leases, deadlines and
timeouts run on it, as on a real host whose clock is stepped. Slow drift is a sequence
of small jumps (``drift``), since libfaketime's rate mode also scales sleeps.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from .procs import in_ci


def libfaketime() -> str:
    """Path of libfaketime.so.1; skip when missing, fail under CI=true."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")) + sorted(
        glob.glob("/usr/lib/faketime/libfaketime.so.1")
    )
    if not found:
        reason = "libfaketime not found (run: make servers, which installs Debian's faketime)"
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return found[0]


class FakeClock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0.0
        self.jump(0)

    @property
    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def jump(self, offset: float) -> None:
        """Set the process's wall clock to real time + ``offset`` seconds (atomically)."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset:+.6f}\n")
        os.replace(tmp, self.path)
        self.offset = offset

    def drift(self, ppm: float, elapsed: float) -> None:
        """The offset a clock running ``ppm`` fast has gathered after ``elapsed`` seconds."""
        self.jump(ppm * 1e-6 * elapsed)
