"""Pocket TTS request wall and time to first audio on each device, for a model file.

One sentence pinned at FRAMES frames (EOS off), one warm-up, then REPS timed requests; prints
medians with the range (request wall, first audio, and the prompt stage as the core times it),
and the seats' counters on a GPU. No peer: for paired rows against the
pocket-tts package use `dasllama bench tts`.

    python bench/tts_device_timing.py MODEL.gguf [--device vulkan --device cpu] [--frames 50]
"""

import argparse
import statistics
import time

from dasllama.tts import TTS

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--device", action="append", help="repeatable (default: vulkan and cpu)")
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    opts = dict(seed=0, eos=False, max_frames=args.frames)
    for dev in args.device or ["vulkan", "cpu"]:
        with TTS(args.model, device=dev) as tts:
            tts.speak(SENTENCE, **opts)
            walls, firsts, prompts, samples = [], [], [], 0
            for _ in range(args.reps):
                t0 = time.perf_counter()
                first, samples = None, 0
                for piece in tts.stream(SENTENCE, **opts):
                    if first is None:
                        first = time.perf_counter() - t0
                    samples += len(piece)
                walls.append(time.perf_counter() - t0)
                firsts.append(first)
                prompts.append(tts.stats.get("stages", {}).get("prompt_ms", float("nan")))
            print(f"{dev:8s} request {1e3 * statistics.median(walls):8.1f} ms "
                  f"[{1e3 * min(walls):.1f}-{1e3 * max(walls):.1f}]  first audio "
                  f"{1e3 * statistics.median(firsts):7.1f} ms  prompt stage "
                  f"{statistics.median(prompts):6.2f} ms  audio {samples / tts.sample_rate:.2f} s"
                  f"  seats {tts.stats.get('seats')}", flush=True)


if __name__ == "__main__":
    main()
