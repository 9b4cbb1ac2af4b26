"""What keeps the server's memory to the model and its KV pool (issue 11's peak-RSS goal; memory
itself is measured by `dasllama bench serve`, never asserted here):

- The server's imports pull in no machine-learning framework (torch, onnxruntime, ...): each
  would add tens to hundreds of MB to every server process. Checked in a fresh interpreter,
  with a negative control showing the check reports a module that is imported.
- dasllama.chat.read_chat_template reads a GGUF file's template without building the
  vocabulary's arrays: equal to the full metadata read, None without a template, ValueError for
  a file that is not GGUF or is cut short.
- A served model gets its template that way: LLM's own whole-metadata read is never made.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dasllama import gguf
from dasllama.chat import read_chat_template
from dasllama.testing import CHATML_TEMPLATE, write_random_model
from test_tool_formats import DEEPSEEK_R1

# Frameworks no server process should load: any of them costs more memory than a small model.
HEAVY = ("torch", "onnxruntime", "onnx", "tensorflow", "jax", "transformers", "ctranslate2",
         "faster_whisper", "ray", "scipy", "pandas", "sklearn", "numba")

# Imports what `dasllama serve -m MODEL` imports before and while serving chat (the app with its
# routers, the CLI, the engine), then prints which of the given top-level modules are loaded.
PROBE = """
import json, sys
import dasllama.cli, dasllama.server.cli, dasllama.batch
from dasllama.server import ServerConfig, create_app
create_app(ServerConfig(models=[], load_at_start=False))
{extra}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set(sys.argv[1:]))))
"""


def loaded(names, extra: str = "") -> list:
    out = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra), *names],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_server_imports_no_ml_framework():
    assert loaded(HEAVY) == []


def test_the_import_check_sees_an_imported_module():
    # Negative control: a module the probe does import is reported, and one made to import is.
    assert loaded(("fastapi", "tabnanny")) == ["fastapi"]
    assert loaded(("tabnanny",), extra="import tabnanny") == ["tabnanny"]


@pytest.mark.parametrize("template", [CHATML_TEMPLATE, DEEPSEEK_R1, None])
def test_read_chat_template_equals_the_full_metadata_read(tmp_path, template):
    path = write_random_model(tmp_path / "m.gguf", "qwen2", tokenizer="bpe",
                              chat_template=template)
    with gguf.open(path) as f:
        full = f.metadata.get("tokenizer.chat_template")
    assert full == template
    assert read_chat_template(path) == template
    # another key is found the same way (a value after the vocabulary's arrays)
    with gguf.open(path) as f:
        arch = f.metadata["general.architecture"]
    assert read_chat_template(path, "general.architecture") == arch == "qwen2"


def test_read_chat_template_of_the_packaged_model():
    from dasllama import models
    try:
        path = models.find("smollm2")
    except Exception as e:      # not fetched on this machine
        pytest.skip(f"the packaged smollm2 model is not here: {e}")
    with gguf.open(path) as f:
        assert read_chat_template(path) == f.metadata["tokenizer.chat_template"]


def test_read_chat_template_refuses_other_files(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "llama", chat_template=CHATML_TEMPLATE)
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:200])          # inside the metadata
    with pytest.raises(ValueError, match="past the end"):
        read_chat_template(cut)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGML" + data[4:])
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_chat_template(other)


@pytest.mark.parametrize("template", [CHATML_TEMPLATE, None])
def test_models_get_their_template_without_the_full_metadata_read(tmp_path, monkeypatch,
                                                                          template):
    from dasllama.server.config import ModelSpec, ServerConfig
    from dasllama.server.registry import LoadedLLM

    path = write_random_model(tmp_path / "m.gguf", "qwen2", tokenizer="bpe",
                              chat_template=template)
    reads = []

    def counted(self):
        reads.append(self.path)
        return self._core.metadata()
    monkeypatch.setattr(gguf.GGUFFile, "metadata", property(counted))
    loaded = LoadedLLM.load(ModelSpec("m", str(path)), ServerConfig(parallel=1, n_ctx=64,
                                                                    threads=1))
    try:
        fmt = loaded.llm.chat_format
        assert (fmt.kind, fmt.template) == (("jinja", template) if template else ("plain", None))
        assert reads == []
    finally:
        loaded.close()
    import dasllama
    with dasllama.LLM(path, n_ctx=64, threads=1) as llm:     # LLM itself reads it alone too
        assert llm.chat_format.template == template
    assert reads == []
    # Negative control: the counter does see a whole-metadata read.
    with gguf.open(path) as f:
        f.metadata
    assert reads == [str(path)]
