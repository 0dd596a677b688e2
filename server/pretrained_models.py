"""`py-in-browser setup` for the pretrained TF.js graph models (PRETRAINED_MODELS of the pinned
@vladmandic/human tarball) and their same-origin URLs, MODELS_PREFIX/<name>/model.json.

The tarball's models/<name>.json names its shard "<name>.bin" relative to itself, so serving the
json as <name>/model.json and the shard beside it keeps the file byte for byte what npm shipped
(its sha256 is in the cache's manifest) while tf.loadGraphModel and pib.load_graph_model resolve
the shard by the same rule.
"""

from __future__ import annotations

from pathlib import Path

from server.runtime_setup import Log
from server.settings import MODELS_PREFIX, PRETRAINED_MODELS, PRETRAINED_PACKAGE, Paths
from server.web_libraries import fetch_npm_files, folder_problems


def model_url(name: str) -> str:
    """Where the dev server serves model `name`'s model.json (the app's backbone URL).

    Example:
        >>> model_url("handlandmark-lite")
        '/models/handlandmark-lite/model.json'
    """
    return f"{MODELS_PREFIX}/{name}/model.json"


def pretrained_problems(paths: Paths) -> list[str]:
    """What is missing or altered in the cached models; empty when complete and intact."""
    return folder_problems(PRETRAINED_PACKAGE, paths.pretrained_models)


def ensure_pretrained_models(paths: Paths, log: Log = print) -> None:
    """Fetch and verify the models unless the cache already holds them intact."""
    problems = pretrained_problems(paths)
    if not problems:
        log(f"models: {', '.join(PRETRAINED_MODELS)} cached and verified")
        return
    log("models: " + "; ".join(problems) + " -> fetching")
    fetch_npm_files(PRETRAINED_PACKAGE, paths.pretrained_models, log)


def served_file(paths: Paths, name: str, file: str) -> Path | None:
    """The cached file behind MODELS_PREFIX/<name>/<file>, or None: model.json is <name>.json,
    and <name>.bin its shard; nothing else of the folder (its manifest) is served."""
    if name not in PRETRAINED_MODELS:
        return None
    stored = {"model.json": f"{name}.json", f"{name}.bin": f"{name}.bin"}.get(file)
    path = None if stored is None else paths.pretrained_models / stored
    return path if path is not None and path.is_file() else None
