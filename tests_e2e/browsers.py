"""How the e2e tests launch real browsers here: Debian's Chromium and Firefox ESR, with GPU flags."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Playwright

CHROMIUM = "/usr/bin/chromium"
FIREFOX = "/usr/bin/firefox-esr"
# Without the background-networking flags Chromium keeps dialling hosts this closed network refuses;
# the last three give WebGPU on the SwiftShader adapter (and WebGL2 on ANGLE/SwiftShader).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-webgpu-adapter=swiftshader",
]
FIREFOX_PREFS: dict[str, str | float | bool] = {
    "dom.webgpu.enabled": True,
    "gfx.webgpu.ignore-blocklist": True,
}


def launch_chromium(playwright: Playwright, extra_args: list[str] | None = None) -> Browser:
    return playwright.chromium.launch(
        executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *(extra_args or [])], headless=True
    )


@contextmanager
def xvfb_display() -> Iterator[str]:
    """A private X display: Firefox's WebGL2 needs one even when nothing is shown."""
    if shutil.which("Xvfb") is None:
        raise RuntimeError("Xvfb is not installed: apt-get install -y xvfb")
    for number in range(90, 130):
        if (
            not Path(f"/tmp/.X11-unix/X{number}").exists()
            and not Path(f"/tmp/.X{number}-lock").exists()
        ):
            break
    display = f":{number}"
    server = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1280x1024x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/tmp/.X11-unix/X{number}").exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Xvfb {display} did not start")
            time.sleep(0.05)
        yield display
    finally:
        server.terminate()
        server.wait(timeout=10)


def launch_firefox(playwright: Playwright, display: str) -> Browser:
    return playwright.firefox.launch(
        channel="moz-firefox",
        executable_path=FIREFOX,
        firefox_user_prefs=FIREFOX_PREFS,
        headless=False,
        env={**os.environ, "DISPLAY": display},
    )
