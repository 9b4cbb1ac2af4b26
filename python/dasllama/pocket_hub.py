"""Pocket TTS from the Hugging Face hub: ``dasllama pull pocket`` and ``pocket:LANGUAGE``.

Kyutai publishes Pocket TTS per language in ``kyutai/pocket-tts-without-voice-cloning``
(``languages/LANGUAGE/model.safetensors``, ``tokenizer.json`` and a catalog of voices as
precomputed backbone states, ``embeddings/NAME.safetensors``), each file at a pinned revision.
``pull`` fetches the checkpoint and the tokenizer through huggingface_hub (into the hub's own
cache layout under ``$cache/huggingface``), converts them once into
``$cache/pocket-LANGUAGE/pocket-LANGUAGE-LANE.gguf`` and copies the voices it is asked for
beside it, into ``voices/``, where :class:`dasllama.TTS` finds them by name::

    dasllama pull pocket                      # English, the q8_0 lane, its default voice
    dasllama pull pocket:french --lane f32 --voices estelle,alba

    tts = dasllama.TTS("pocket")              # or "pocket:french"
    audio, sr = tts.speak("Hello.", voice="alba")

The revisions and the per-language text rules below are the ones the pocket-tts package
(4.0.1) pins in its configs; the network architecture is the same for every language. The
checkpoint with the voice encoder (voice cloning from audio) is a gated repository and is not
fetched here: ``TTS.register_voice`` needs a model converted from it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Union

from . import models
from .errors import ModelNotFoundError

__all__ = ["PocketRelease", "RELEASES", "VOICES", "LANES", "is_pocket_name", "parse_pocket_name",
           "find_pocket", "pull_pocket"]

REPO = "kyutai/pocket-tts-without-voice-cloning"
VOICES_REVISION = "a7056f505a4a8ca72d8b5fb1440071d6f1a35739"
LANES = ("q8_0", "f16", "f32")
DEFAULT_LANE = "q8_0"      # the served lane: 8-bit matrices, f32 activations
DEFAULT_LANGUAGE = "english"
NAMES = ("pocket", "pocket-tts")

# The catalog of predefined voices (their states were computed with the released weights).
VOICES = ("alba", "marius", "javert", "jean", "fantine", "cosette", "eponine", "azelma",
          "anna", "vera", "charles", "paul", "george", "mary", "jane", "michael", "eve",
          "bill_boerst", "peter_yearsley", "stuart_bell", "caro_davy", "giovanni", "lola",
          "juergen", "rafael", "daan", "estelle")

_QUOTES_AND_BRACKETS = {'"': "", "\u201c": "", "\u201d": "", "\u201e": "", "\u00ab": "",
                        "\u00bb": "", "\u2019": "'", "\u2018": "'", "(": "", ")": "", "[": "",
                        "]": "", "\u2013": ","}
_SHARED_REVISION = "1e08e6a23401048648a9fdcfde2f89348215c2a7"
_SHARED_TOKENIZER = "4e1e0a3e611c51c0b4ed8174fc10f32a54644303"


@dataclass(frozen=True)
class PocketRelease:
    """One language's files on the hub and the text rules its config sets (laid over the
    English config by :func:`dasllama.convert.pocket.load_config`)."""

    language: str
    weights_revision: str
    tokenizer_revision: str
    default_voice: str
    text_rules: dict = field(default_factory=dict)

    @property
    def weights(self) -> str:
        return f"languages/{self.language}/model.safetensors"

    @property
    def tokenizer(self) -> str:
        return f"languages/{self.language}/tokenizer.json"

    def voice(self, name: str) -> str:
        return f"languages/{self.language}/embeddings/{name}.safetensors"


def _rules(extra: Optional[dict] = None, remove_semicolons: bool = False) -> dict:
    rules: dict = {"replace_characters": {**_QUOTES_AND_BRACKETS, **(extra or {})}}
    if remove_semicolons:
        rules["remove_semicolons"] = True
    return rules


RELEASES = {
    "english": PocketRelease("english", VOICES_REVISION, "00eac05ed3d16bdc3f6b5d598874019c34a89214",
                             "alba"),
    "french": PocketRelease("french", _SHARED_REVISION, "8843db76457a91db32077edf8dfcd1c0e3e755fd",
                            "estelle", _rules({":": ","}, remove_semicolons=True)),
    "german": PocketRelease("german", _SHARED_REVISION, _SHARED_TOKENIZER, "juergen",
                            _rules({"\u2014": ","}, remove_semicolons=True)),
    "italian": PocketRelease("italian", _SHARED_REVISION, _SHARED_TOKENIZER, "giovanni", _rules()),
    "spanish": PocketRelease("spanish", _SHARED_REVISION, _SHARED_TOKENIZER, "lola",
                             _rules({"\u00a1": "", "\u00bf": ""})),
    "portuguese": PocketRelease("portuguese", _SHARED_REVISION, _SHARED_TOKENIZER, "rafael",
                                _rules()),
    "dutch": PocketRelease("dutch", _SHARED_REVISION, _SHARED_TOKENIZER, "daan", _rules()),
}


def is_pocket_name(text: Union[str, os.PathLike]) -> bool:
    """Whether ``text`` names the hub's Pocket TTS: ``pocket`` or ``pocket:LANGUAGE``."""
    return isinstance(text, str) and text.lower().split(":", 1)[0] in NAMES


def parse_pocket_name(text: str) -> PocketRelease:
    """The release ``pocket`` / ``pocket:LANGUAGE`` names; ModelReferenceError otherwise."""
    base, _, language = text.lower().partition(":")
    if base not in NAMES:
        raise models.ModelReferenceError(f"{text!r} is not a Pocket TTS name; write pocket or "
                                         f"pocket:LANGUAGE")
    release = RELEASES.get(language or DEFAULT_LANGUAGE)
    if release is None:
        raise models.ModelReferenceError(
            f"{text!r}: no Pocket TTS release for language {language!r}; known: "
            f"{', '.join(RELEASES)}")
    return release


def _folder(release: PocketRelease) -> Path:
    return models.cache_dir() / f"pocket-{release.language}"


def _gguf(release: PocketRelease, lane: str) -> Path:
    return _folder(release) / f"pocket-{release.language}-{lane}.gguf"


def find_pocket(text: str, lane: Optional[str] = None) -> Path:
    """The converted model of ``pocket[:LANGUAGE]`` in the cache (lane None: the first of
    q8_0, f16, f32 that was pulled). Never uses the network; ModelNotFoundError says how to
    pull it."""
    release = parse_pocket_name(text)
    for candidate in ([_check_lane(lane)] if lane else LANES):
        path = _gguf(release, candidate)
        if path.is_file():
            return path
    lane_flag = f" --lane {lane}" if lane else ""
    raise ModelNotFoundError(f"{text} is not in the cache ({_folder(release)}); fetch it with "
                             f"`dasllama pull {text}{lane_flag}`")


def _check_lane(lane: str) -> str:
    if lane not in LANES:
        raise models.ModelReferenceError(f"lane {lane!r}: expected one of {', '.join(LANES)}")
    return lane


def _voices_wanted(release: PocketRelease, voices: Union[None, str, Sequence[str]]) -> list:
    if voices is None:
        return [release.default_voice]
    names = voices.split(",") if isinstance(voices, str) else list(voices)
    names = [n.strip() for n in names if n.strip()]
    if names == ["all"]:
        return list(VOICES)
    unknown = [n for n in names if n not in VOICES]
    if unknown:
        raise models.ModelReferenceError(f"unknown Pocket TTS voice(s) {', '.join(unknown)}; "
                                         f"the catalog: {', '.join(VOICES)} (or all)")
    return names


def _download(hub, endpoint: str, path: str, revision: str, *, force: bool) -> Path:
    ref = models.HubReference(REPO, path, revision)
    try:
        return Path(hub.hf_hub_download(REPO, path, revision=revision,
                                        cache_dir=str(models.hub_cache_dir()), endpoint=endpoint,
                                        force_download=force, library_name="dasllama"))
    except models._hub_errors(hub) as e:
        raise models._hub_error(hub, e, ref, endpoint, path) from None


class _ConvertBar:
    """A tqdm bar over the tensors converted (huggingface_hub depends on tqdm), or nothing."""

    def __init__(self, show: bool, label: str):
        self.bar = None
        if show:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(desc=label, unit="tensor", leave=False)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.total = total
            self.bar.n = done
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def pull_pocket(text: str = "pocket", *, lane: str = DEFAULT_LANE,
                voices: Union[None, str, Iterable[str]] = None, force: bool = False,
                progress: bool = False, log: Callable[[str], None] = print) -> Path:
    """Fetch ``pocket[:LANGUAGE]`` from the hub, convert it in ``lane`` (q8_0, f16 or f32) into
    the cache and copy the voices asked for (None: the language's default voice; "all": the
    whole catalog) into its ``voices/`` folder. Returns the GGUF's path. A model already
    converted is kept unless ``force``; a voice already copied is kept too."""
    from .convert.pocket import convert_pocket

    release = parse_pocket_name(text)
    _check_lane(lane)
    wanted = _voices_wanted(release, voices)
    hub = models._hub()
    endpoint = models._hub_endpoint(hub)
    target = _gguf(release, lane)
    target.parent.mkdir(parents=True, exist_ok=True)
    with models._hub_progress(hub, progress):
        if force or not target.is_file():
            log(f"{text}: fetching {release.weights} and {release.tokenizer} from {REPO} on "
                f"{endpoint}")
            weights = _download(hub, endpoint, release.weights, release.weights_revision,
                                force=force)
            tokenizer = _download(hub, endpoint, release.tokenizer, release.tokenizer_revision,
                                  force=force)
            log(f"{text}: converting to {target.name} (lane {lane})")
            bar = _ConvertBar(progress, f"converting {target.name}")
            try:
                convert_pocket(weights, tokenizer, target, lane=lane, config=release.text_rules,
                               name=f"Pocket TTS ({release.language})", progress=bar)
            finally:
                bar.close()
        else:
            log(f"{text}: already converted in {target}")
        voice_dir = target.parent / "voices"
        voice_dir.mkdir(exist_ok=True)
        for name in wanted:
            out = voice_dir / f"{name}.safetensors"
            if out.is_file() and not force:
                continue
            log(f"{text}: voice {name}")
            src = _download(hub, endpoint, release.voice(name), VOICES_REVISION, force=force)
            tmp = out.with_name(out.name + ".part")
            shutil.copyfile(src, tmp)
            os.replace(tmp, out)
    log(f"{text}: saved {target} (voices: {', '.join(sorted(p.stem for p in voice_dir.glob('*.safetensors'))) or 'none'})")
    return target
