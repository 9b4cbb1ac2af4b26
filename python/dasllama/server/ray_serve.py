"""dasllama's server on Ray Serve: the same ASGI app (dasllama.server.app.create_app) in each
of several replicas, behind Ray Serve's HTTP proxy.

::

    dasllama serve -m smollm2 --parallel 4 --ray --replicas 2
    dasllama serve -m smollm2 --ray --autoscale 1:4          # replicas follow the load

    # or with Ray's own command line, on a running cluster (`ray start --head`):
    serve run dasllama.server.ray_serve:app model=smollm2 parallel=4 replicas=2
    DASLLAMA_SERVE_ARGS="-m smollm2 --parallel 4 --replicas 2" \\
        serve run dasllama.server.ray_serve:app

``app`` is an application builder: Serve calls it with the ``key=value`` arguments of
``serve run``, each read as the ``dasllama serve`` option of that name (``max_queue=8`` is
``--max-queue 8``; ``model`` and ``tts`` take comma-separated lists; ``args="..."`` passes
options verbatim), after the options in $DASLLAMA_SERVE_ARGS. Host and port are Serve's
(``serve run`` binds 127.0.0.1:8000; ``dasllama serve --ray`` binds --host and --port).

Each replica loads its own copy of the models and answers every route of the server. The
deployment's settings come from the server's:

- admission is the app's, as under uvicorn: a replica admits its capacity (each language
  model's slots and --max-queue waiting requests, each speech model's one request and its
  queue) and answers the next request with its own 503 and Retry-After in the OpenAI error
  shape. Ray's proxy would answer a full Ray queue itself, with a plain-text body, so Ray
  never refuses: ``max_queued_requests`` is -1 (Ray's router holds a request only for the
  moment every replica is at its ``max_ongoing_requests``), and ``max_ongoing_requests`` is
  REFUSAL_ROOM times the replica's capacity, so requests past the capacity reach the app to
  be refused instead of waiting in Ray. Ray's power-of-two-choices routing still sends each
  request to the less busy of two replicas;
- ``autoscaling_config``: with --autoscale MIN:MAX, replicas between MIN and MAX aiming at
  full slots (``target_ongoing_requests`` = the slots: language models' --parallel, one per
  speech model); else --replicas fixed replicas;
- ``ray_actor_options.num_cpus``: --threads (1 when unset), and a replica with no --threads
  runs that many threads rather than one per core, so replicas on one node do not fight.

Every response carries ``x-dasllama-replica``: the id of the replica that answered it.
Streams (chat, completions, speech) pass through Ray as they are produced.

Needs the ``ray`` extra: ``pip install 'dasllama[ray]'``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

try:
    import ray
    from ray import serve
except ImportError as e:    # the module is only imported for Ray: say what is missing
    raise ImportError(f"dasllama.server.ray_serve needs Ray Serve (pip install "
                      f"'dasllama[ray]'): {e}") from e

from .config import ServerConfig

__all__ = ["app", "DasllamaDeployment", "RayOptions", "build_application", "deployment_options",
           "replica_slots", "replica_capacity", "REFUSAL_ROOM",
           "serve_blocking", "REPLICA_HEADER", "ARGS_ENV", "DEPLOYMENT_NAME"]

REPLICA_HEADER = "x-dasllama-replica"
ARGS_ENV = "DASLLAMA_SERVE_ARGS"
DEPLOYMENT_NAME = "dasllama"
# Build arguments that hold comma-separated lists of a repeatable option.
_LIST_ARGS = ("model", "tts", "voice", "asr")
# A replica takes up to this many times the requests it admits (its slots and queues): the
# rest of a burst reaches the app, which refuses it in the OpenAI shape, rather than Ray's
# proxy, which would answer in plain text. Twice leaves room for a burst as large again as
# the replica's whole capacity before Ray's router holds a request back.
REFUSAL_ROOM = 2
# Ray's value of max_queued_requests for a queue without a limit.
RAY_UNBOUNDED_QUEUE = -1
# How often `dasllama serve --ray` looks whether it was interrupted.
_WAIT_PERIOD_S = 1.0


@dataclass
class RayOptions:
    """How the server is spread over Ray: replicas (fixed), or autoscale (min, max) replicas;
    num_cpus each replica reserves (None: the config's threads, else 1); app_name: the Serve
    application's name."""
    replicas: int = 1
    autoscale: Optional[Tuple[int, int]] = None
    num_cpus: Optional[float] = None
    app_name: str = DEPLOYMENT_NAME

    def __post_init__(self):
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) \
                or self.replicas < 1:
            raise ValueError(f"replicas must be an integer >= 1, got {self.replicas!r}")
        if self.autoscale is not None:
            low, high = self.autoscale
            if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high
                    and high >= 1):
                raise ValueError(f"autoscale must be (min, max) with 0 <= min <= max and "
                                 f"max >= 1, got {self.autoscale!r}")
        if self.num_cpus is not None and not self.num_cpus >= 0:
            raise ValueError(f"num_cpus must be >= 0, got {self.num_cpus!r}")


class _ReplicaHeader:
    """ASGI middleware: names the replica in every HTTP response's headers."""

    def __init__(self, app, replica: str):
        self.app = app
        self._header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def named_send(message):
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + [self._header]
            await send(message)

        await self.app(scope, receive, named_send)


@serve.deployment(name=DEPLOYMENT_NAME)
@serve.ingress()
class DasllamaDeployment:
    """One replica: the server's app for config, built in the replica's process (Serve calls
    __serve_build_asgi_app__ after the constructor; the app's lifespan then loads the models,
    and requests wait for them as under uvicorn)."""

    def __init__(self, config: ServerConfig):
        self._config = config
        self._app = None

    def __serve_build_asgi_app__(self):
        from .app import create_app

        replica = serve.get_replica_context().replica_id.unique_id
        app = create_app(self._config)
        app.add_middleware(_ReplicaHeader, replica=replica)
        self._app = app
        return app

    def check_health(self) -> None:
        """Ray restarts a replica whose model failed to load; one still loading is healthy."""
        if self._app is None:
            return
        ready, reason = self._app.state.registry.health()
        if not ready and not reason.startswith("loading"):
            raise RuntimeError(reason)


def replica_slots(config: ServerConfig) -> int:
    """Requests one replica serves at once: each language model's slots, one per other
    model (a speech model serves one request at a time)."""
    total = 0
    for spec in config.models:
        total += config.slots_of(spec) if spec.kind == "llm" else 1
    return max(1, total)


def replica_capacity(config: ServerConfig) -> int:
    """Requests one replica admits at once: what it serves (replica_slots) and, per model,
    --max-queue more waiting for it."""
    return replica_slots(config) + config.max_queue * max(1, len(config.models))


def deployment_options(config: ServerConfig, options: RayOptions) -> Dict[str, Any]:
    """The Serve deployment's options for config (see the module docstring)."""
    slots = replica_slots(config)
    num_cpus = options.num_cpus if options.num_cpus is not None else float(config.threads or 1)
    out: Dict[str, Any] = {"max_ongoing_requests": REFUSAL_ROOM * replica_capacity(config),
                           "max_queued_requests": RAY_UNBOUNDED_QUEUE,
                           "ray_actor_options": {"num_cpus": num_cpus}}
    if options.autoscale is not None:
        low, high = options.autoscale
        out["autoscaling_config"] = {"min_replicas": low, "max_replicas": high,
                                     "initial_replicas": max(low, 1),
                                     "target_ongoing_requests": slots}
    else:
        out["num_replicas"] = options.replicas
    return out


def build_application(config: ServerConfig, options: Optional[RayOptions] = None):
    """The Serve application (for serve.run) of config spread as options say."""
    options = options or RayOptions()
    if config.threads is None:
        # One thread per reserved CPU, not one per core: replicas share the node.
        threads = max(1, int(options.num_cpus)) if options.num_cpus else 1
        config = dataclasses.replace(config, threads=threads)
    return DasllamaDeployment.options(**deployment_options(config, options)).bind(config)


# --------------------------------------------------------------------------------------------
# `serve run dasllama.server.ray_serve:app key=value ...`
# --------------------------------------------------------------------------------------------
def _argv_from_build_args(args: Dict[str, Any]) -> List[str]:
    argv = shlex.split(os.environ.get(ARGS_ENV, ""))
    for key, value in (args or {}).items():
        if key == "args":
            argv += shlex.split(str(value))
            continue
        flag = "--" + key.replace("_", "-")
        values = str(value).split(",") if key in _LIST_ARGS else [str(value)]
        for v in values:
            argv += [flag, v.strip()]
    return argv


def parse_serve_args(argv: List[str]) -> argparse.Namespace:
    """`dasllama serve` options parsed as the command line parses them."""
    from .cli import add_serve_parser

    parser = argparse.ArgumentParser(prog="dasllama")
    add_serve_parser(parser.add_subparsers(dest="command"))
    try:
        return parser.parse_args(["serve", *argv])
    except SystemExit as e:    # argparse has printed why; Serve should see an error, not exit
        raise ValueError(f"invalid dasllama serve options {argv!r} (see the message "
                         f"above)") from e


def ray_options_from_args(args: argparse.Namespace) -> RayOptions:
    return RayOptions(replicas=getattr(args, "replicas", None) or 1,
                      autoscale=getattr(args, "autoscale", None))


def app(args: Optional[Dict[str, Any]] = None):
    """The application builder `serve run` calls (see the module docstring)."""
    from .cli import config_from_args

    parsed = parse_serve_args(_argv_from_build_args(args or {}))
    return build_application(config_from_args(parsed), ray_options_from_args(parsed))


# --------------------------------------------------------------------------------------------
# `dasllama serve --ray`
# --------------------------------------------------------------------------------------------
def serve_blocking(config: ServerConfig, options: RayOptions) -> None:
    """Starts (or joins, with $RAY_ADDRESS) a Ray cluster, serves config on
    config.host:config.port through Serve's proxy until interrupted (Ctrl-C or SIGTERM), then
    deletes the application and shuts down what it started."""
    def stop(signum, frame):    # SIGTERM (a service manager's stop) ends it like Ctrl-C
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, include_dashboard=False,
                 log_to_driver=False)
    try:
        serve.start(http_options={"host": config.host, "port": config.port})
        serve.run(build_application(config, options), name=options.app_name, route_prefix="/")
        print(f"dasllama serve: Ray Serve application {options.app_name!r} ready at "
              f"http://{config.host}:{config.port}/v1", file=sys.stderr, flush=True)
        while True:
            time.sleep(_WAIT_PERIOD_S)
    except KeyboardInterrupt:
        pass
    finally:
        try:
            serve.delete(options.app_name)
        finally:
            if started_ray:
                serve.shutdown()
                ray.shutdown()
