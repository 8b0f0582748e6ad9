"""The image a Captain runs ``docker`` tasks from, built on its node from its own code.

No registry is reachable on the project's machines, so a Captain builds the task image
itself, ``FROM`` its pod's image (the harness's base image: empty folders, with the
host's interpreter and the project's virtual environment bind-mounted read-only). The
image's one layer holds the project's Python packages (``nodes``, ``testbed``,
``workloads``: the task programs and what they import) under :data:`APP_DIR`, first on
``PYTHONPATH``; the libraries (aiohttp, NumPy, OpenCV) stay the mounted environment's.
So the first deployment on a node pays for building this layer, and every later one
finds it cached: the image cache is per node (:func:`repository`), as on real nodes, even
though the nodes of one run share one engine.

The tag is a hash of the layer's content: changed code makes a new image, and the old
one is removed after the build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import py_compile
import re
import tempfile
from pathlib import Path

#: The ``image`` a deployment names for the docker runtime (the only one a Captain has).
TASK_IMAGE = "armada-task"
#: Where the task programs' code lies in the image.
APP_DIR = "/opt/armada-task"
#: The project's packages copied into the image.
PACKAGES = ("nodes", "testbed", "workloads")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def repository(node_id: str) -> str:
    """The node's own repository of the task image (its image cache)."""
    return f"{TASK_IMAGE}/" + (re.sub(r"[^a-z0-9._-]+", "-", node_id.lower()).strip("-._")
                               or "node")


def _sources(root: Path) -> list[Path]:
    return [path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))
            if "__pycache__" not in path.parts]


def source_digest(root: Path = PROJECT_ROOT) -> str:
    """A hash of the code the image holds: it names the image, so changed code is built
    anew (cheap: the files are read, not compiled)."""
    digest = hashlib.sha256()
    for path in _sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def image_files(root: Path = PROJECT_ROOT) -> dict[str, bytes]:
    """The build context's files: every ``.py`` file of :data:`PACKAGES` under ``app/``,
    each with its bytecode (hash-checked, so it stays valid whatever the files' times in
    the image): a task in the image compiles nothing at start, as in a built image."""
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="armada-task-") as tmp:
        compiled = Path(tmp) / "code.pyc"
        for path in _sources(root):
            name = path.relative_to(root)
            files[f"app/{name.as_posix()}"] = path.read_bytes()
            py_compile.compile(str(path), cfile=str(compiled), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
            cache = Path(importlib.util.cache_from_source(str(name)))
            files[f"app/{cache.as_posix()}"] = compiled.read_bytes()
    return files


def dockerfile() -> list[str]:
    """The lines after ``FROM``: the code, and the interpreter finding it first."""
    return [f"COPY app {APP_DIR}", f"ENV PYTHONPATH={APP_DIR}", f"WORKDIR {APP_DIR}",
            "ENV PYTHONDONTWRITEBYTECODE=1"]
