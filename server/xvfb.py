"""A private X display (Xvfb) for browsers that need one even when nothing is shown: Firefox's
WebGL2, WebKitGTK's MiniBrowser (the e2e tests' WebKit leg, and set-up's WebKit snapshot)."""

from __future__ import annotations

import select
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def xvfb_display() -> Iterator[str]:
    """A private X display, its name (":99"). Xvfb picks a
    free display number itself (-displayfd), so parallel test runs never race for one."""
    if shutil.which("Xvfb") is None:
        raise RuntimeError("Xvfb is not installed: apt-get install -y xvfb")
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", "1", "-screen", "0", "1280x1024x24", "-nolisten", "tcp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 10)
        number = server.stdout.readline().strip() if ready else ""
        if not number.isdigit():
            raise RuntimeError("Xvfb did not start (no display number within 10 s)")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(timeout=10)
