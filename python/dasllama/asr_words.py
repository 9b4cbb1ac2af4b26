"""Word timestamps for dasllama.ASR, as faster-whisper 1.2.1 computes them.

A window's text tokens are aligned to its audio by the C++ alignment pass
(``_core.WhisperModel.align``: the cross-attention of the model's alignment heads, normalized,
median filtered, averaged and aligned by dynamic time warping; csrc/asr/whisper/alignment.h).
The DTW path gives, for each text token, the encoder frame (20 ms) where its row starts. Then:

- Words: the tokens are cut where their decoded bytes form whole characters; English and most
  languages then join pieces into words at a leading space (a piece that begins with a space,
  a special token or a punctuation piece starts a new word); Chinese, Japanese, Thai, Lao,
  Burmese and Cantonese keep the character cut.
- A word starts at its first token's frame and ends at the next word's first frame; its
  probability is the mean of its tokens' probabilities.
- Durations: with the median word duration m (at most 0.7 s) and max = 2m, a sentence-ending
  mark longer than max is cut to max, and a word after one starts at most max before its end;
  the first word after a pause (its end more than 4m after the last speech) is cut to max
  (and the second word shares the boundary); a segment's first word that starts more than
  0.5 s before the segment's start timestamp starts there instead, and its last word that
  ends more than 0.5 s after the segment's end timestamp ends there; otherwise the segment's
  start and end become its first word's start and last word's end.
- Punctuation: a word made of a prepended mark (``prepend_punctuations``, with its leading
  space) joins the word after it; a word made of an appended mark (``append_punctuations``)
  joins the word before it.

Times are seconds, rounded to 0.01. ``hallucination_silence_threshold`` (faster-whisper's
option) uses the words to skip silence before a segment that looks hallucinated
(:func:`is_segment_anomaly`).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Word", "DEFAULT_PREPEND_PUNCTUATIONS", "DEFAULT_APPEND_PUNCTUATIONS",
           "split_to_word_tokens", "word_timings", "merge_punctuations", "add_word_timestamps",
           "is_segment_anomaly", "words_end", "seek_by_words"]

DEFAULT_PREPEND_PUNCTUATIONS = "\"'“¿([{-"
DEFAULT_APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
# Languages written without spaces between words: split at every whole character instead.
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
SENTENCE_END_MARKS = ".。!！?？"
# Marks a word may be without counting in the hallucination score (faster-whisper's list).
ANOMALY_PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"
MAX_MEDIAN_DURATION = 0.7   # s: the median word duration the clamps use is at most this
FRAMES_PER_SECOND = 100     # mel frames (10 ms hops)
TOKENS_PER_SECOND = 50      # encoder frames (conv2's stride 2): the DTW's time unit
REPLACEMENT = "\ufffd"      # what decoding puts for bytes that are not whole characters


@dataclass
class Word:
    """One word of a segment (faster-whisper's fields): seconds in the audio, the text with
    its leading space, the mean probability of its tokens."""
    start: float
    end: float
    word: str
    probability: float

    def _asdict(self) -> dict:
        return {"start": self.start, "end": self.end, "word": self.word,
                "probability": self.probability}


# ------------------------------------------------------------------ splitting into words

def _split_on_characters(decode, tokens: Sequence[int]) -> Tuple[List[str], List[List[int]]]:
    """Cuts ``tokens`` after every token where the text decoded so far is whole characters:
    the text of the pending tokens holds no U+FFFD, or its first U+FFFD is one that the whole
    text has at that place too (a real U+FFFD, not a partial character)."""
    full = decode(list(tokens))
    words, groups, pending, offset = [], [], [], 0
    for token in tokens:
        pending.append(token)
        text = decode(pending)
        at = text.find(REPLACEMENT)
        if at < 0 or (offset + at < len(full) and full[offset + at] == REPLACEMENT):
            words.append(text)
            groups.append(pending)
            pending = []
            offset += len(text)
    return words, groups


def split_to_word_tokens(decode, tokens: Sequence[int], eot: int,
                         language: Optional[str] = "en") -> Tuple[List[str], List[List[int]]]:
    """(words, token groups) of ``tokens`` (text tokens, then <|endoftext|>). decode: token
    ids -> text (special tokens decode to nothing). See the module text for the rules."""
    pieces, groups = _split_on_characters(decode, tokens)
    if language in NO_SPACE_LANGUAGES:
        return pieces, groups
    words: List[str] = []
    word_tokens: List[List[int]] = []
    for piece, group in zip(pieces, groups):
        # a piece starts a word when it is special, begins with a space, or its stripped text
        # occurs in string.punctuation (a substring test, as faster-whisper's: "" counts)
        if (group[0] >= eot or piece.startswith(" ") or piece.strip() in string.punctuation
                or not words):
            words.append(piece)
            word_tokens.append(list(group))
        else:
            words[-1] += piece
            word_tokens[-1].extend(group)
    return words, word_tokens


# ------------------------------------------------------------------ timings of one window

def word_timings(alignment: dict, words: List[str], word_tokens: List[List[int]]) -> List[dict]:
    """Word dicts (word, tokens, start, end, probability; seconds from the window's start) of
    one window from its alignment (``_core.WhisperModel.align``'s dict) and its words (the
    last one <|endoftext|>'s)."""
    if len(word_tokens) <= 1:
        return []
    bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    text_idx = np.asarray(alignment["text_indices"], dtype=np.int64)
    time_idx = np.asarray(alignment["time_indices"], dtype=np.int64)
    probs = np.asarray(alignment["text_token_probs"], dtype=np.float64)
    # the frame where each row of the DTW path begins
    starts = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[starts] / TOKENS_PER_SECOND
    missing = int(bounds[-1]) + 1 - len(jump_times)
    if missing > 0:
        # the path reached the first frame before the first rows (they all begin there)
        jump_times = np.concatenate([np.zeros(missing), jump_times])
    out = []
    for k in range(len(bounds) - 1):
        i, j = int(bounds[k]), int(bounds[k + 1])
        out.append(dict(word=words[k], tokens=word_tokens[k], start=jump_times[i],
                        end=jump_times[j], probability=np.mean(probs[i:j])))
    return out


def merge_punctuations(alignment: List[dict], prepended: str, appended: str) -> None:
    """Joins punctuation words to their neighbours in place (see the module text); a joined
    word is left empty (no text, no tokens). Membership is a substring test, as
    faster-whisper's."""
    # prepended marks, from the end: " (" joins the word after it
    following = len(alignment) - 1
    for i in range(len(alignment) - 2, -1, -1):
        prev, nxt = alignment[i], alignment[following]
        if prev["word"].startswith(" ") and prev["word"].strip() in prepended:
            nxt["word"] = prev["word"] + nxt["word"]
            nxt["tokens"] = prev["tokens"] + nxt["tokens"]
            prev["word"], prev["tokens"] = "", []
        else:
            following = i
    # appended marks, from the start: "," joins the word before it
    previous = 0
    for j in range(1, len(alignment)):
        prev, nxt = alignment[previous], alignment[j]
        if not prev["word"].endswith(" ") and nxt["word"] in appended:
            prev["word"] = prev["word"] + nxt["word"]
            prev["tokens"] = prev["tokens"] + nxt["tokens"]
            nxt["word"], nxt["tokens"] = "", []
        else:
            previous = j


def _clamp_sentence_marks(alignment: List[dict]) -> Tuple[float, float]:
    """The median and max durations of a window's words, and the sentence-mark clamp."""
    durations = np.array([w["end"] - w["start"] for w in alignment])
    durations = durations[durations.nonzero()]
    median = np.median(durations) if len(durations) > 0 else 0.0
    median = min(MAX_MEDIAN_DURATION, float(median))
    longest = median * 2
    if len(durations) > 0:
        for i in range(1, len(alignment)):
            w, before = alignment[i], alignment[i - 1]
            if w["end"] - w["start"] > longest:
                if w["word"] in SENTENCE_END_MARKS:
                    w["end"] = w["start"] + longest
                elif before["word"] in SENTENCE_END_MARKS:
                    w["start"] = w["end"] - longest
    return median, longest


def add_word_timestamps(model, segments: List[dict], sot_sequence: Sequence[int],
                        num_frames: int, decode, eot: int, language: Optional[str],
                        prepend_punctuations: str, append_punctuations: str,
                        last_speech_timestamp: float) -> float:
    """Gives each segment dict of one window (seek, start, end, tokens) its "words" (dicts of
    word, start, end, probability) and moves its start and end to them (see the module text).
    model: the ``_core.WhisperModel`` whose current window is this one (the caller holds its
    lock); num_frames: the window's mel frames of audio. Returns the new last speech time."""
    if not segments:
        return last_speech_timestamp
    per_segment = [[t for t in s["tokens"] if t < eot] for s in segments]
    text_tokens = [t for tokens in per_segment for t in tokens]
    alignment: List[dict] = []
    if text_tokens:
        result = model.align(list(sot_sequence), text_tokens, int(num_frames))
        words, word_tokens = split_to_word_tokens(decode, text_tokens + [eot], eot, language)
        alignment = word_timings(result, words, word_tokens)
    median, longest = _clamp_sentence_marks(alignment)
    merge_punctuations(alignment, prepend_punctuations, append_punctuations)

    time_offset = segments[0]["seek"] / FRAMES_PER_SECOND
    k = 0
    for segment, tokens in zip(segments, per_segment):
        saved, words = 0, []
        while k < len(alignment) and saved < len(tokens):
            timing = alignment[k]
            if timing["word"]:
                words.append(dict(word=timing["word"],
                                  start=round(time_offset + timing["start"], 2),
                                  end=round(time_offset + timing["end"], 2),
                                  probability=timing["probability"]))
            saved += len(timing["tokens"])
            k += 1
        if words:
            first, last = words[0], words[-1]
            # the first (and second) word after a pause: at most the max duration
            if first["end"] - last_speech_timestamp > median * 4 and (
                    first["end"] - first["start"] > longest or
                    (len(words) > 1 and words[1]["end"] - first["start"] > longest * 2)):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > longest:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - longest)
                    first["end"] = words[1]["start"] = boundary
                first["start"] = max(0, first["end"] - longest)
            # a first word far before the segment's start timestamp starts there instead
            if segment["start"] < first["end"] and segment["start"] - 0.5 > first["start"]:
                first["start"] = max(0, min(first["end"] - median, segment["start"]))
            else:
                segment["start"] = first["start"]
            # a last word far past the segment's end timestamp ends there instead
            if segment["end"] > last["start"] and segment["end"] + 0.5 < last["end"]:
                last["end"] = max(last["start"] + median, segment["end"])
            else:
                segment["end"] = last["end"]
            last_speech_timestamp = segment["end"]
        segment["words"] = words
    return last_speech_timestamp


# ------------------------------------------------------------------ hallucination checks

def _word_anomaly(word: dict) -> float:
    """How unlike speech a word looks: improbable, very short or very long."""
    probability = word.get("probability", 0.0)
    duration = word["end"] - word["start"]
    score = 0.0
    if probability < 0.15:
        score += 1.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def is_segment_anomaly(segment: Optional[dict]) -> bool:
    """A segment whose first 8 non-punctuation words look hallucinated (faster-whisper's
    score: at least 3, or about one per word)."""
    if segment is None or not segment["words"]:
        return False
    words = [w for w in segment["words"] if w["word"] not in ANOMALY_PUNCTUATION][:8]
    score = sum(_word_anomaly(w) for w in words)
    return score >= 3 or score + 0.01 >= len(words)


def words_end(segments: List[dict]) -> Optional[float]:
    """The last word's end among ``segments``, else the last segment's end (None: none)."""
    for s in reversed(segments):
        for w in reversed(s.get("words") or []):
            return w["end"]
    return segments[-1]["end"] if segments else None


def seek_by_words(tokens: List[int], timestamp_begin: int, current: List[dict], seek: int,
              previous_seek: int, time_offset: float, segment_size: int,
              content_frames: int, per_frame: float, n_window: int, last_speech: float,
              threshold: Optional[float]):
    """faster-whisper 1.2.1's seeking with word timestamps, after one window: the next window
    starts at the last word's end (unless the output ended on a lone timestamp), and with a
    ``threshold`` (hallucination_silence_threshold, seconds) the silence before a segment that
    looks hallucinated is skipped. per_frame: seconds per mel frame; n_window: mel frames per
    window. Returns (seek, the segments kept, whether to go on to the next window at once,
    emitting nothing of this one)."""
    ts = timestamp_begin
    single_ending = len(tokens) >= 2 and tokens[-2] < ts <= tokens[-1]
    if not single_ending:
        end = words_end(current)
        if end is not None and end > time_offset:
            seek = round(end * FRAMES_PER_SECOND)
    if threshold is None:
        return seek, current, False
    fps = FRAMES_PER_SECOND
    segment_duration = segment_size * per_frame
    window_end = (previous_seek + n_window) * per_frame
    with_words = [s for s in current if s["words"]]
    # a first segment that might be a hallucination: skip the silence before it
    if with_words and is_segment_anomaly(with_words[0]):
        gap = with_words[0]["start"] - time_offset
        if gap > threshold:
            return previous_seek + round(gap * fps), current, True
    # a hallucination between silences (or more hallucinations): drop it and what follows
    hal_last_end = last_speech
    for si, segment in enumerate(current):
        if not segment["words"]:
            continue
        if is_segment_anomaly(segment):
            following = next((s for s in current[si + 1:] if s["words"]), None)
            hal_next_start = (following["words"][0]["start"] if following is not None
                              else time_offset + segment_duration)
            silence_before = (segment["start"] - hal_last_end > threshold
                              or segment["start"] < threshold
                              or segment["start"] - time_offset < 2.0)
            silence_after = (hal_next_start - segment["end"] > threshold
                             or is_segment_anomaly(following)
                             or window_end - segment["end"] < 2.0)
            if silence_before and silence_after:
                seek = round(max(time_offset + 1, segment["start"]) * fps)
                if content_frames * per_frame - segment["end"] < threshold:
                    seek = content_frames
                return seek, current[:si], False
        hal_last_end = segment["end"]
    return seek, current, False
