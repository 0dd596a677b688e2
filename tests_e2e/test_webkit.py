"""WebKit (WebKitGTK's MiniBrowser through WebKitWebDriver, tests_e2e/webkit.py): the gesture
trainer's collect, train, predict, save and restore path with WebKit's mock camera, its
accessibility scan, start-up across visits (the server's WebKit snapshot on a first visit; the
browser's own snapshot and bytecode, kept in IndexedDB, on a second), and why the CPU runs where
WebKit gives the engine's worker no WebGL2. The smoke tests and the feature matrix have WebKit
rows of their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from py_in_browser.testing import workloads
from tests_e2e.app_gestures import CLASSES, gesture_set, png
from tests_e2e.conftest import READY_OR_TIMEOUT
from tests_e2e.test_app import (
    BATCH_SIZE,
    CLASS_COUNT,
    EPOCHS,
    INPUT_SIZE,
    LEARNING_RATE,
    TRAIN_PER_CLASS,
)
from tests_e2e.webkit import SAFARI_FEATURES, WebKitBrowser, WebKitPage, launch_webkit

pytestmark = pytest.mark.webkit

# WebKit's own fake camera; WebDriver sessions grant it without a prompt.
MOCK_CAMERA = ["--enable-mock-capture-devices=true", "--enable-media-stream=true"]
# A machine without a camera: capture on, WebKit's mock devices off, and this Xvfb has none of its
# own, so getUserMedia fails as it does there (OverconstrainedError). A denied permission cannot
# be had: WebKitWebDriver's sessions grant every capture request.
NO_CAMERA = ["--enable-media-stream=true", "--enable-mock-capture-devices=false"]
# WebKit's IndexedDB switched off: a page that may store nothing, as in some private windows.
NO_INDEXEDDB = "!IndexedDBAPI"
XOR = {"epochs": 20}
TRAIN = f"from py_in_browser.testing import workloads\nawait workloads.run_xor(**{XOR!r})"
NOTHING_CACHED = {"runtime": False, "numpy": False, "engine": False}
# What a visit that restores a snapshot times of its start-up (web/js/runtime-parts.js).
RESTORED_PARTS = (
    "worker",
    "wasm",
    "snapshot",
    "script",
    "instantiate",
    "link",
    "restore",
    "relink",
)
STORED = "() => [window.pib.startup.snapshot_store, window.pib.startup.bytecode_store].every((s) => s !== 'storing')"


def type_into(page: WebKitPage, element_id: str, text: str) -> None:
    """Types `text` over a field's value, as a user selecting it all would (WebDriver's clear()
    leaves WebKitGTK's fields as they were)."""
    page.evaluate(f"() => document.getElementById({element_id!r}).select()")
    page.driver().find_element(By.ID, element_id).send_keys(text, Keys.TAB)
    assert page.evaluate(f"() => document.getElementById({element_id!r}).value") == text


def open_app(page: WebKitPage, url: str) -> None:
    page.goto(url)
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate(READY_OR_TIMEOUT)
    page.wait_for_function(
        "() => document.getElementById('engine-state').textContent.startsWith('Ready')"
    )


def live_labels(page: WebKitPage) -> list[str]:
    """The classes of a live prediction made after this call, from the mock camera."""
    page.evaluate("() => { window.gestureTrainer.prediction.result = null; }")
    page.wait_for_function("() => window.gestureTrainer.prediction.result !== null")
    result = page.evaluate("() => window.gestureTrainer.prediction.result")
    scores = [entry["score"] for entry in result["top"]]
    assert scores == sorted(scores, reverse=True), result
    return sorted(entry["label"] for entry in result["top"])


@pytest.fixture(scope="module")
def app_page(server_url: str) -> Iterator[WebKitPage]:
    with launch_webkit(settings=MOCK_CAMERA) as browser:
        page = browser.new_page()
        open_app(page, f"{server_url}/?mode=scratch")  # transfer mode: test_app_transfer.py
        yield page


def test_collect_train_predict_save_and_restore(
    app_page: WebKitPage, server_url: str, tmp_path: Path
) -> None:
    page, driver = app_page, app_page.driver()
    driver.find_element(By.ID, "add-class").click()
    page.wait_for_function("() => document.querySelectorAll('.class-card').length === 3")
    for index, (kind, images) in enumerate(gesture_set(TRAIN_PER_CLASS, seed=1).items()):
        card = driver.find_elements(By.CSS_SELECTOR, ".class-card")[index]
        name = card.find_element(By.CSS_SELECTOR, ".class-name")
        page.evaluate(f"() => document.querySelectorAll('.class-name')[{index}].select()")
        name.send_keys(kind, Keys.TAB)
        paths = []
        for i, image in enumerate(images):
            path = tmp_path / f"{kind}-{i}.png"
            path.write_bytes(png(image))
            paths.append(str(path))
        card.find_element(By.CSS_SELECTOR, "input.upload").send_keys("\n".join(paths))
        page.wait_for_function(f"() => {CLASS_COUNT}({index}) === {len(paths)}")
    names = "() => [...document.querySelectorAll('.class-name')].map((field) => field.value)"
    assert page.evaluate(names) == list(CLASSES)
    for field, value in (
        ("epochs", EPOCHS),
        ("learning-rate", LEARNING_RATE),
        ("batch-size", BATCH_SIZE),
    ):
        type_into(page, field, str(value))
    Select(driver.find_element(By.ID, "input-size")).select_by_value(str(INPUT_SIZE))
    driver.find_element(By.ID, "train").click()
    page.wait_for_function("() => !document.getElementById('evaluation').hidden")
    training: dict[str, Any] = page.evaluate("() => window.gestureTrainer.lastTraining")
    backend = page.evaluate("() => window.pib.backend")
    print(
        f"\nwebkit {backend}: {EPOCHS} epochs in {training['seconds']:.1f} s, held-out "
        f"{training['accuracy']:.3f}, longest main-thread task {training['longestTaskMs']:.0f} ms"
    )
    assert training["held_out_count"] == 3 * round(TRAIN_PER_CLASS * 0.15)
    assert training["batch_size"] == BATCH_SIZE
    assert training["accuracy"] >= 0.9, training
    # The mock camera is classified live, each frame a transferred bitmap the engine takes.
    assert live_labels(page) == sorted(CLASSES)

    driver.find_element(By.ID, "save-browser").click()
    page.wait_for_function(
        "() => document.getElementById('keep-message').textContent.startsWith('Saved in this browser')"
    )
    # A reload: samples and the model come back from IndexedDB.
    open_app(page, f"{server_url}/?mode=scratch")
    counts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".class-card .count")]
    assert counts == [f"{TRAIN_PER_CLASS} samples"] * 3, "the samples were not restored"
    assert page.evaluate(names) == list(CLASSES)
    driver.find_element(By.ID, "load-browser").click()
    page.wait_for_function("() => !document.getElementById('prediction').hidden")
    assert live_labels(page) == sorted(CLASSES)


def disc_images(tmp_path: Path, count: int) -> list[Path]:
    """`count` synthetic "disc" gestures as PNG files under `tmp_path`."""
    paths = [tmp_path / f"disc-{i}.png" for i in range(count)]
    for path, image in zip(paths, gesture_set(count, seed=5)["disc"], strict=True):
        path.write_bytes(png(image))
    return paths


def upload(page: WebKitPage, card: int, paths: list[Path]) -> None:
    """Uploads the images at `paths` into class card `card` and waits until it counts them."""
    before = page.evaluate(f"() => {CLASS_COUNT}({card})")
    cards = page.driver().find_elements(By.CSS_SELECTOR, ".class-card")
    cards[card].find_element(By.CSS_SELECTOR, "input.upload").send_keys("\n".join(map(str, paths)))
    page.wait_for_function(f"() => {CLASS_COUNT}({card}) === {before + len(paths)}")


def test_without_a_camera_or_indexeddb_the_app_says_so_and_still_works(
    server_url: str, tmp_path: Path
) -> None:
    """No camera and no IndexedDB: the page says both, the engine still gets ready (the
    server's snapshot restored, nothing kept for the next visit), and uploaded images are
    collected in the tab's memory."""
    with launch_webkit(features=[*SAFARI_FEATURES, NO_INDEXEDDB], settings=NO_CAMERA) as browser:
        page = browser.new_page()
        open_app(page, f"{server_url}/")
        page.wait_for_function("() => !document.getElementById('camera-message').hidden")
        camera = page.evaluate("() => document.getElementById('camera-message').textContent")
        banners = page.evaluate("() => document.getElementById('banners').textContent")
        startup = page.evaluate("() => window.pib.startup")
        upload(page, 0, disc_images(tmp_path, 3))
    assert "No camera was found" in camera and "upload images instead" in camera, camera
    assert "does not let the page store data here (a private window?)" in banners, banners
    assert "kept in this tab's memory only" in banners, banners
    assert (startup["snapshot"], startup["snapshot_source"]) == ("loaded", "server"), startup
    assert (startup["bytecode"], startup["snapshot_store"]) == ("unavailable", None), startup


# Writes of samples fail as writes over the site's quota do (the QuotaExceededError DOMException
# test_app_storage.py raises in Chromium) while `full`: WebKit's quota cannot be lowered for one
# origin from WebDriver, which runs no script before the page's either, so the page's put is
# swapped in place, and back.
QUOTA = """(full) => {
  const store = IDBObjectStore.prototype;
  store.originalPut ??= store.put;
  store.put = full ? function (...args) {
    if (this.name === "frames") throw new DOMException("The quota has been exceeded.", "QuotaExceededError");
    return store.originalPut.apply(this, args);
  } : store.originalPut;
}"""


def test_a_full_quota_says_so_and_goes_on_in_memory(app_page: WebKitPage, tmp_path: Path) -> None:
    app_page.evaluate(QUOTA, True)
    try:
        upload(app_page, 0, disc_images(tmp_path, 3))
        app_page.evaluate("() => window.gestureTrainer.store.flush()")
        banners = app_page.evaluate("() => document.getElementById('banners').textContent")
    finally:
        app_page.evaluate(QUOTA, False)
    assert "storage for this site is full" in banners, banners
    assert "the samples stored so far stay" in banners, banners


def test_accessibility_scan_finds_nothing_serious(app_page: WebKitPage) -> None:
    app_page.evaluate(
        """() => new Promise((resolve, reject) => {
            const script = document.createElement("script");
            script.src = "/lib/axe-core/axe.min.js";
            script.onload = resolve;
            script.onerror = () => reject(new Error("axe-core did not load"));
            document.head.append(script);
        })"""
    )
    violations = app_page.evaluate(
        """async () => (await axe.run(document)).violations
            .filter((v) => v.impact === "serious" || v.impact === "critical")
            .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`)"""
    )
    assert violations == []


def test_status_panel_and_capabilities_say_webkits_gpu_name_is_a_stand_in(
    app_page: WebKitPage, server_url: str
) -> None:
    """WebKit names every GPU "Apple GPU", the llvmpipe rasteriser under this Xvfb too: the app
    on webgl2 says the name is a stand-in that may hide a software GPU, not that it is hardware."""
    # A window of its own: a second load of the app in the first one found no WebGL2 in its worker.
    page = app_page.browser.new_page()
    open_app(page, f"{server_url}/?backend=webgl2")
    page.wait_for_function("() => document.querySelectorAll('#status-list dd').length > 1")
    gpu = page.evaluate("() => document.querySelectorAll('#status-list dd')[1].textContent")
    capabilities = page.evaluate("() => window.pib.runPython('pib.capabilities()')")
    page.close()
    print(f"\nwebkit webgl2 status panel, GPU: {gpu}")
    assert capabilities["renderer"] == "Apple GPU", capabilities
    assert capabilities["renderer_masked"] is True and capabilities["software_renderer"] is None
    assert gpu.startswith("Apple GPU: a name the browser shows in place of the real GPU's"), gpu
    assert "may be a software GPU" in gpu, gpu


def visit(browser: WebKitBrowser, url: str, then: str | None = None) -> tuple[Any, Any]:
    """One visit in the session's window: pib.startup once what it stores is stored, and the
    result of the Python `then`."""
    page = browser.pages[0] if browser.pages else browser.new_page()
    page.goto(url)
    page.wait_for_function("() => window.pib !== undefined")
    page.evaluate(READY_OR_TIMEOUT)
    page.wait_for_function(STORED)
    startup = page.evaluate("() => window.pib.startup")
    value = None if then is None else page.evaluate("(c) => window.pib.runPython(c)", then)
    return startup, value


def xor_in_cpython() -> Any:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, workloads.run_xor(**XOR)).result()


def test_visits_restore_the_servers_snapshot_then_their_own_from_indexeddb(
    server_url: str,
) -> None:
    """A first visit restores the snapshot set-up made in WebKitGTK and keeps it, with the bytecode
    it wrote, in IndexedDB (WebKitGTK ships the origin-private file system off, and its automation
    sessions refuse it); the second visit restores both from there. WebKitGTK as shipped (no
    features switched on) gives the engine's worker neither WebGPU nor WebGL2: the second visit
    lets init choose, cpu is all it has, and both the page and pib.capabilities() say why."""
    url = f"{server_url}/console"
    with launch_webkit(features=[]) as browser:
        first, got = visit(browser, f"{url}?backend=cpu", TRAIN)
        second, (backend, selection) = visit(
            browser, url, 'pib.get_backend(), pib.capabilities()["selection"]'
        )
        environment = browser.pages[0].evaluate("() => window.pib.environment")
    print(f"webkit first visit {first}\nwebkit second visit {second}")
    assert (first["snapshot"], first["snapshot_source"]) == ("loaded", "server"), first
    parts = first["runtime_parts"]
    assert set(RESTORED_PARTS) <= set(parts), parts
    # The page begins compiling the runtime and downloading the server's snapshot and the bundles
    # before the worker has booted (engine-downloads.js), not once its scripts are in.
    booted = parts["worker"][1]
    for part in ("wasm", "snapshot_download", "numpy_download", "engine_download"):
        assert parts[part][0] < booted, (part, parts)
    assert first["snapshot_store"] == "stored", first
    assert (first["bytecode"], first["bytecode_store"]) == ("absent", "stored"), first
    np.testing.assert_allclose(got["losses"], xor_in_cpython()["losses"], rtol=0, atol=1e-5)
    assert (second["snapshot"], second["snapshot_source"]) == ("loaded", "browser"), second
    assert second["bytecode"] == "loaded", second
    # WebKitWebDriver's sessions keep no HTTP cache for a worker's downloads: the second visit
    # downloads them again, and says so (WebKit's resource timing, with every size 0 and no entry
    # for the module scripts it reuses, cannot tell; web/js/http-cache.js).
    assert second["http_cache"] == first["http_cache"] == NOTHING_CACHED, (first, second)
    webgl2 = environment["webgl2"]
    assert not webgl2["available"] and "AllowWebGLInWorkers" in webgl2["reason"], webgl2
    assert (backend, selection["mode"], selection["chosen"]) == ("cpu", "measured", "cpu")
    assert [c["name"] for c in selection["candidates"]] == ["cpu"], selection
    assert selection["unavailable"] == {
        "webgpu": environment["webgpu"]["reason"],
        "webgl2": webgl2["reason"],
    }, selection
    assert "navigator.gpu is absent" in selection["unavailable"]["webgpu"], selection


def test_reloads_keep_webgl2_in_the_worker_and_the_remembered_verdicts(server_url: str) -> None:
    """WebKit with workers' WebGL2 on (as Safari has it): a reload right after ready still gets
    WebGL2 in the engine's worker, so the GPU fingerprint holds and init reuses the self-test it
    kept. The probe's context used to be lost on purpose, which made WebKit refuse the next page's
    worker a context: every other reload self-tested again on a "changed" GPU."""
    url = f"{server_url}/console?backend=cpu"
    then = '[pib.capabilities()["selection"][k] for k in ("remembered", "unavailable")]'
    with launch_webkit() as browser:
        visits = [visit(browser, url, then)[1] for _ in range(3)]
    print(f"\nwebkit reloads, [remembered, unavailable]: {visits}")
    assert [remembered for remembered, _ in visits] == [False, True, True], visits
    assert not any("webgl2" in unavailable for _, unavailable in visits), visits
