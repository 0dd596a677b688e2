"""How the e2e tests launch real browsers here: Debian's Chromium and Firefox ESR, with GPU flags."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

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
# WebGPU in Firefox (also in the engine's Web Worker) runs on lavapipe, which the Vulkan loader
# finds by itself: with VK_ICD_FILENAMES pointing nowhere, requestAdapter() finds no adapter.
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
    """A private X display: Firefox's WebGL2 needs one even when nothing is shown. Xvfb picks a
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


def launch_firefox(playwright: Playwright, display: str) -> Browser:
    return playwright.firefox.launch(
        channel="moz-firefox",
        executable_path=FIREFOX,
        firefox_user_prefs=FIREFOX_PREFS,
        headless=False,
        env={**os.environ, "DISPLAY": display},
    )
