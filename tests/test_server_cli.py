"""`dasllama serve` on the command line: options, model naming, config, and errors. (The fuzz
test starts the real command in a subprocess and serves through it.)"""

from __future__ import annotations

import argparse

import pytest

from test_server_support import random_model

from dasllama import cli
from dasllama.errors import ModelNotFoundError
from dasllama.server.cli import add_serve_parser, config_from_args, model_specs
from dasllama.server.config import DEFAULT_HOST, ServerConfig


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *argv])


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["serve", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--model", "--parallel", "--ctx", "--host", "--port", "--api-key", "--cors",
                   "--max-queue", "--keep-alive", "--threads", "--timeout"):
        assert option in out


def test_models_are_named_by_alias_or_file_stem(tmp_path):
    a = random_model(tmp_path, "alpha")
    b = random_model(tmp_path, "beta")
    specs = model_specs([str(a), f"chat={b}"])
    assert [(s.name, s.source) for s in specs] == [("alpha", str(a)), ("chat", str(b))]
    with pytest.raises(ValueError, match="name before '='"):
        model_specs([f"={a}"])
    with pytest.raises(ModelNotFoundError):
        model_specs(["no-such-model-anywhere"])
    with pytest.raises(ValueError, match="share the name 'alpha'"):
        ServerConfig(models=model_specs([str(a), f"alpha={b}"]))


def test_arguments_become_the_server_config(tmp_path, monkeypatch):
    path = random_model(tmp_path, "m")
    monkeypatch.setenv("DASLLAMA_API_KEY", "from-env")
    args = _parse(["-m", str(path), "--parallel", "3", "--ctx", "512", "--cors",
                   "http://a.example, http://b.example", "--keep-alive", "30",
                   "--max-queue", "5", "--threads", "2", "--timeout", "9"])
    config = config_from_args(args)
    assert config.host == DEFAULT_HOST == "127.0.0.1"
    assert (config.parallel, config.n_ctx, config.max_queue, config.threads) == (3, 512, 5, 2)
    assert config.cors_origins == ["http://a.example", "http://b.example"]
    assert config.keep_alive == 30.0 and config.request_timeout == 9.0
    assert config.api_key == "from-env"
    monkeypatch.delenv("DASLLAMA_API_KEY")
    config = config_from_args(_parse(["-m", str(path)]))
    assert config.api_key is None and config.cors_origins is None and config.keep_alive is None
    assert config.sliding_rings is False
    assert config_from_args(_parse(["-m", str(path), "--sliding-rings"])).sliding_rings is True


@pytest.mark.parametrize("argv", [["--parallel", "0"], ["--ctx", "-1"], ["--port", "-5"],
                                  ["--keep-alive", "-1"], ["--timeout", "0"],
                                  ["--max-queue", "x"]])
def test_bad_numbers_are_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as e:
        _parse(argv)
    assert e.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_an_unknown_model_is_an_error_not_a_traceback(capsys):
    assert cli.main(["serve", "-m", "no-such-model-anywhere"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dasllama: error:") and "no-such-model-anywhere" in err


def test_python_m_dasllama_is_the_command_line(tmp_path):
    """`python -m dasllama` runs dasllama.cli.main: the same help, the same output for a
    command, the same exit status for an error."""
    import subprocess
    import sys

    def run(*argv):
        return subprocess.run([sys.executable, "-m", "dasllama", *argv], capture_output=True,
                              text=True, timeout=120)

    helped = run("serve", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: ") and "--asr" in helped.stdout
    assert "--parallel" in helped.stdout
    path = random_model(tmp_path, "tiny")
    info = run("info", str(path))
    direct = subprocess.run([sys.executable, "-m", "dasllama.cli", "info", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert info.returncode == direct.returncode == 0, info.stderr
    assert info.stdout == direct.stdout and "architecture" in info.stdout
    failed = run("serve", "-m", "no-such-model-anywhere")
    assert failed.returncode == 1 and "no-such-model-anywhere" in failed.stderr
    assert run("no-such-command").returncode == 2
