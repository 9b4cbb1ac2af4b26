"""Prometheus metrics for GET /metrics.

Per model (label ``model``), read from its engine at each scrape: requests running and queued,
slots busy and slots, tokens/s generated over the last THROUGHPUT_WINDOW_S, prompt tokens,
cached prompt tokens, prompt cache hits, generated tokens, KV pool bytes, and whether the model
is loaded; on a GPU, the batching engine's steps by seat and outcome (served, or the reason the
device declined them and the CPU ran them). Per speech model (TTS and ASR, which serve one
request at a time): requests holding or waiting for it. Per ASR model: transcriptions by task
and outcome, seconds of audio transcribed and seconds the model spent on them. Per server: HTTP
requests by route and status, requests in flight, time to first token. Each app has a registry
of its own, so several servers in one process do not mix.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["ServerMetrics", "CONTENT_TYPE_LATEST", "PREFIX"]

PREFIX = "dasllama"

# Time-to-first-token buckets (seconds): a loaded CPU server spans milliseconds to tens of s.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_GAUGES = (   # engine stats key, metric name, help
    ("running", "requests_running", "Requests being decoded (holding a slot)."),
    ("queued", "requests_queued", "Requests waiting for a free slot."),
    ("slots_busy", "slots_busy", "Slots holding an active sequence."),
    ("slots", "slots", "Slots of the model's batching engine."),
    ("kv_pool_bytes", "kv_pool_bytes", "Bytes of the shared KV pool."),
    ("scratch_bytes", "engine_scratch_bytes",
     "Bytes the batching engine holds beyond weights and KV pool (step logits, sampler "
     "scratch, slot histories)."),
    ("forward_scratch_bytes", "forward_scratch_bytes",
     "Bytes of the forward pass's row buffers the engine's steps run on (the model's own)."),
)
_COUNTERS = (
    ("prompt_tokens", "prompt_tokens", "Prompt tokens of finished and running requests."),
    ("cached_tokens", "prompt_cached_tokens", "Prompt tokens reused from a slot's cache."),
    ("prompt_cache_hits", "prompt_cache_hits", "Requests that reused a cached prefix."),
    ("generated_tokens", "generated_tokens", "Tokens generated."),
)


class _EngineCollector:
    """Reads every model's engine stats at scrape time."""

    def __init__(self, registry_of_models):
        self._models = registry_of_models

    def collect(self):
        loaded = GaugeMetricFamily(f"{PREFIX}_model_loaded",
                                   "1 while the model is loaded, else 0.", labels=["model"])
        tps = GaugeMetricFamily(f"{PREFIX}_generation_tokens_per_second",
                                "Tokens generated per second over the last 10 s.",
                                labels=["model"])
        gauges = {key: GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
                  for key, name, doc in _GAUGES}
        counters = {key: CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["model"])
                    for key, name, doc in _COUNTERS}
        seat_steps = CounterMetricFamily(
            f"{PREFIX}_gpu_seat_steps", "Batching-engine steps by GPU seat and outcome: "
            "served on the device, or the reason it declined them (the CPU ran those).",
            labels=["model", "seat", "outcome"])
        for entry in self._models.entries():
            loaded.add_metric([entry.name], 1.0 if entry.state == "ready" else 0.0)
            stats = entry.stats()
            if stats is None:
                continue
            tps.add_metric([entry.name], entry.tokens_per_second())
            for key, family in gauges.items():
                family.add_metric([entry.name], float(stats.get(key, 0)))
            for key, family in counters.items():
                family.add_metric([entry.name], float(stats.get(key, 0)))
            for seat, figures in stats.get("seats", {}).items():
                seat_steps.add_metric([entry.name, seat, "served"], float(figures["served"]))
                for reason, n in figures["declined"].items():
                    seat_steps.add_metric([entry.name, seat, reason], float(n))
        serial = GaugeMetricFamily(f"{PREFIX}_serial_requests_active",
                                   "Requests holding or waiting for a model that serves one at a "
                                   "time (speech synthesis, transcription).", labels=["model"])
        for entry in self._models.entries():
            waiting = getattr(entry.loaded, "waiting", None) if entry.state == "ready" else None
            if waiting is not None:
                serial.add_metric([entry.name], float(waiting))
        yield loaded
        yield serial
        yield tps
        yield from gauges.values()
        yield from counters.values()
        yield seat_steps


class ServerMetrics:
    """The app's metrics: .registry (a prometheus CollectorRegistry), HTTP counters, TTFT."""

    def __init__(self, models):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(models))
        self.http_requests = Counter(f"{PREFIX}_http_requests", "HTTP requests answered.",
                                     ["route", "status"], registry=self.registry)
        self.in_flight = Gauge(f"{PREFIX}_http_requests_in_flight",
                               "HTTP requests being answered.", registry=self.registry)
        self.ttft = Histogram(f"{PREFIX}_time_to_first_token_seconds",
                              "Seconds from a generation request's arrival to its first token.",
                              ["model"], buckets=TTFT_BUCKETS, registry=self.registry)
        self.transcriptions = Counter(
            f"{PREFIX}_transcription_requests", "Transcription and translation requests that "
            "reached the model, by task and outcome (ok, rejected: a 4xx for the file or an "
            "option, failed, cancelled).", ["model", "task", "outcome"], registry=self.registry)
        self.transcribed_audio = Counter(f"{PREFIX}_transcription_audio_seconds",
                                         "Seconds of audio transcribed.", ["model"],
                                         registry=self.registry)
        self.transcription_time = Counter(f"{PREFIX}_transcription_processing_seconds",
                                          "Seconds the ASR models spent transcribing (decoding "
                                          "the file included).", ["model"],
                                          registry=self.registry)
        self.started = time.time()

    def observe_transcription(self, model: str, task: str, outcome: str,
                              audio_seconds: float = 0.0, processing_seconds: float = 0.0) -> None:
        self.transcriptions.labels(model=model, task=task, outcome=outcome).inc()
        if audio_seconds:
            self.transcribed_audio.labels(model=model).inc(audio_seconds)
        if processing_seconds:
            self.transcription_time.labels(model=model).inc(processing_seconds)

    def observe_ttft(self, model: str, seconds: float) -> None:
        self.ttft.labels(model=model).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
