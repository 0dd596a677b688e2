"""How the e2e tests launch real browsers here: Debian's Chromium and Firefox ESR, with GPU flags."""

from __future__ import annotations

import os

from playwright.sync_api import Browser, Playwright

# Firefox's WebGL2 and WebKitGTK need an X display; set-up uses it too (WebKit's snapshot).
from server.xvfb import xvfb_display as xvfb_display

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
    # A fake camera without a permission prompt, for the gesture trainer's tests.
    "media.navigator.streams.fake": True,
    "media.navigator.permission.disabled": True,
}


def launch_chromium(playwright: Playwright, extra_args: list[str] | None = None) -> Browser:
    return playwright.chromium.launch(
        executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *(extra_args or [])], headless=True
    )


def launch_firefox(playwright: Playwright, display: str) -> Browser:
    return playwright.firefox.launch(
        channel="moz-firefox",
        executable_path=FIREFOX,
        firefox_user_prefs=FIREFOX_PREFS,
        headless=False,
        env={**os.environ, "DISPLAY": display},
    )
