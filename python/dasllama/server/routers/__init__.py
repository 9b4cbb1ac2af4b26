"""The server's routers, one module per area, each exposing ``router`` (a FastAPI APIRouter).

CORE are always served. OPTIONAL are served when their module is present in this package
(speech and embeddings join that way): adding an area is adding its module and, if it is not
listed yet, its name here.
"""

from __future__ import annotations

import importlib
import importlib.util

__all__ = ["include_routers", "CORE", "OPTIONAL"]

CORE = ("system", "chat", "completions")
OPTIONAL = ("embeddings", "audio", "transcription")


def include_routers(app) -> list:
    """Includes every router on app; returns the names of the areas included."""
    included = []
    for name in CORE + OPTIONAL:
        qualified = f"{__name__}.{name}"
        if name in OPTIONAL and importlib.util.find_spec(qualified) is None:
            continue
        app.include_router(importlib.import_module(qualified).router)
        included.append(name)
    return included
