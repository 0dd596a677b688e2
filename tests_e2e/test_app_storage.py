"""The gesture trainer's IndexedDB in Chromium: a page without IndexedDB (as in some private
windows) and a site whose storage quota runs out while samples are uploaded (both say so in a
banner, keep what was stored, and go on collecting in the tab's memory), and a database an earlier
release made, upgraded in place."""

from __future__ import annotations

import numpy as np
from playwright.sync_api import Browser, Page

from tests_e2e.app_gestures import gesture_set, png
from tests_e2e.test_app import CLASS_COUNT, SCREENSHOTS, new_app_session

IMAGES = 120


def upload(page: Page, images: int) -> None:
    files = [
        {"name": f"disc-{i}.png", "mimeType": "image/png", "buffer": png(image)}
        for i, image in enumerate(gesture_set(images, seed=21)["disc"])
    ]
    page.locator(".class-card").nth(0).locator("input.upload").set_input_files(files)  # type: ignore[arg-type]
    page.wait_for_function(f"() => {CLASS_COUNT}(0) === {images}")


def test_without_indexeddb_samples_stay_in_memory(chromium: Browser, server_url: str) -> None:
    session = new_app_session(chromium, server_url)
    session.context.add_init_script(
        "Object.defineProperty(window, 'indexedDB', { get: () => undefined, configurable: true });"
    )
    session.open()
    page = session.page
    page.evaluate("() => window.gestureTrainer.restored")
    banner = page.inner_text("#banners")
    assert "does not let the page store data here (a private window?)" in banner, banner
    assert "kept in this tab's memory only" in banner
    upload(page, 20)
    strip = page.locator(".class-card").nth(0)
    assert strip.locator(".strip-range").inner_text() == "Showing 9–20 of 20 (the newest)"
    strip.locator(".strip-older").click()
    page.wait_for_function(
        "() => document.querySelector('.class-card .strip-range').textContent === 'Showing 1–8 of 20'"
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    session.shot("11-no-indexeddb.png")
    session.context.close()


# The site's storage fills up after STORED samples: from then on a write of a sample fails as
# Chromium fails one over the quota (a QuotaExceededError DOMException). Chromium's quota itself
# cannot be lowered for one origin from here (CDP's Storage.overrideQuotaForOrigin left
# navigator.storage.estimate()'s quota at 10 GB), so the failure is the browser's error, raised
# where the browser raises it.
STORED = 100
FULL_QUOTA = f"""
(() => {{
  const put = IDBObjectStore.prototype.put;
  let frames = 0;
  IDBObjectStore.prototype.put = function (...args) {{
    if (this.name === "frames" && ++frames > {STORED}) {{
      throw new DOMException("The quota has been exceeded.", "QuotaExceededError");
    }}
    return put.apply(this, args);
  }};
}})();
"""


def test_a_full_quota_keeps_what_was_stored_and_goes_on(chromium: Browser, server_url: str) -> None:
    session = new_app_session(chromium, server_url)
    session.context.add_init_script(FULL_QUOTA)
    session.open()
    page = session.page
    page.evaluate("() => window.gestureTrainer.restored")
    upload(page, IMAGES)
    page.evaluate("() => window.gestureTrainer.store.flush()")
    banner = page.inner_text("#banners")
    assert "storage for this site is full" in banner, banner
    assert "the samples stored so far stay" in banner
    card = page.locator(".class-card").nth(0)
    assert card.locator(".count").inner_text() == f"{IMAGES} samples"
    assert (
        card.locator(".strip-range").inner_text()
        == f"Showing {IMAGES - 11}–{IMAGES} of {IMAGES} (the newest)"
    )
    session.shot("12-quota-full.png")
    page.reload()
    session.open()
    page.evaluate("() => window.gestureTrainer.restored")
    # Whole batches (of up to 64) were stored until one failed: what was stored comes back.
    stored = page.evaluate(f"{CLASS_COUNT}(0)")
    print(f"\nthe quota ran out after {STORED} samples; {stored} were stored and restored")
    assert 0 < stored <= STORED, stored
    assert page.inner_text("#keep-message").startswith(f"Restored 2 classes and {stored} samples")
    session.context.close()


# An earlier release's database: schema 2 (classes, frames keyed [classId, seq], models), without
# schema 3's embeddings. Samples are 64x64 RGBA, as the app stores them (web/js/trainer/frames.js).
SCHEMA_2 = """
async (classes) => {
  const db = await new Promise((resolve, reject) => {
    const opening = indexedDB.open("pib-gesture-trainer", 2);
    opening.onupgradeneeded = () => {
      opening.result.createObjectStore("classes", { keyPath: "id" });
      opening.result.createObjectStore("models", { keyPath: "id" });
      opening.result.createObjectStore("frames", { keyPath: ["classId", "seq"] });
    };
    opening.onsuccess = () => resolve(opening.result);
    opening.onerror = () => reject(opening.error);
  });
  const tx = db.transaction(["classes", "frames"], "readwrite");
  classes.forEach(({ name, samples }, order) => {
    tx.objectStore("classes").put({ id: `old-${order}`, name, order });
    samples.forEach((rgba, seq) => tx.objectStore("frames").put({ classId: `old-${order}`, seq, rgba: new Uint8ClampedArray(rgba) }));
  });
  await new Promise((resolve) => { tx.oncomplete = resolve; });
  db.close();
}
"""


def rgba(image: np.ndarray) -> list[int]:
    """A 64x64 RGB image as the app stores a sample: RGBA bytes, opaque."""
    alpha = np.full((*image.shape[:2], 1), 255, np.uint8)
    return np.concatenate([image, alpha], axis=2).ravel().tolist()


def test_samples_stored_by_the_previous_schema_come_back_and_train_in_transfer_mode(
    chromium: Browser, server_url: str
) -> None:
    """A person who collected samples before embeddings were kept (schema 2) opens the app in
    its default transfer mode: the database is upgraded in place, the samples come back, and
    training embeds them from their stored pixels, once, into the new store."""
    per_class = 3
    session = new_app_session(chromium, server_url)
    session.page.goto(f"{server_url}/api/engine")  # the app's origin, before the app opens it
    kinds = gesture_set(per_class, seed=22)
    classes = [
        {"name": kind, "samples": [rgba(image) for image in images]}
        for kind, images in list(kinds.items())[:2]
    ]
    session.page.evaluate(SCHEMA_2, classes)
    session.query = "?backend=cpu"  # the default mode: transfer
    session.open()
    page = session.page
    page.evaluate("() => window.gestureTrainer.restored")
    assert page.inner_text("#keep-message").startswith(
        f"Restored 2 classes and {2 * per_class} samples"
    )
    page.evaluate("() => { window.gestureTrainer.lastTraining = null; }")
    page.click("#train")
    page.wait_for_function("() => window.gestureTrainer.lastTraining !== null", timeout=300_000)
    training = page.evaluate("() => window.gestureTrainer.lastTraining")
    stored = page.evaluate(
        """async () => {
            const db = window.gestureTrainer.storage.db;
            const count = (store) => new Promise((resolve) => {
                db.transaction(store).objectStore(store).count().onsuccess = (e) => resolve(e.target.result);
            });
            return { version: db.version, frames: await count("frames"), embeddings: await count("embeddings") };
        }"""
    )
    session.context.close()
    assert training["backbone"] is not None and training["train_count"] >= per_class, training
    assert stored == {"version": 3, "frames": 2 * per_class, "embeddings": 2 * per_class}, stored


def test_the_chosen_model_kind_is_kept_across_reloads(chromium: Browser, server_url: str) -> None:
    """From scratch, once chosen in the Model select, is still chosen after a reload without
    ?mode=; ?mode= in the address wins over it."""
    session = new_app_session(chromium, server_url)
    session.query = "?backend=cpu"
    session.open()
    page = session.page
    assert page.input_value("#model-kind") == "transfer"  # the default
    page.select_option("#model-kind", "scratch")
    page.reload()
    page.wait_for_function("() => window.gestureTrainer !== undefined")  # main.js has run
    assert page.input_value("#model-kind") == "scratch"
    assert page.is_enabled("#input-size")
    page.goto(f"{server_url}/?backend=cpu&mode=transfer")
    page.wait_for_function("() => window.gestureTrainer !== undefined")
    assert page.input_value("#model-kind") == "transfer"
    session.context.close()
