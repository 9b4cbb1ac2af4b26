"""POST /v1/embeddings on a live server (loopback, a free port) through the openai client.

Vectors are checked against the NumPy reference chain's final hidden states (pooled and
normalized here), not against LLM.embed, so the route and the engine are both under test.
rel = ||server - reference|| / ||reference||; each check carries a negative control (another
pooling or another input) that must miss the bar tenfold.
"""

from __future__ import annotations

import base64
import threading

import numpy as np
import pytest
from parity import check, rel_l2
from requires import require

from dasllama.reference import llm as reference_llm
from dasllama.testing.random_gguf import write_random_model

# The C++ chain computes in float32 against the reference's float64: the error is float32
# rounding over two layers (measured at most 2.7e-7); the bar leaves room of a few times that.
BAR_EMBEDDING = 1e-6
N_CTX = 96
TEXT = "hello world"
OTHER = "the quick brown fox"
POOLING_TYPES = {"mean": 1, "cls": 2, "last": 3}


def _with_pooling(src, dst, pooling: str):
    """A copy of the GGUF at src with {arch}.pooling_type set to pooling's llama.cpp value."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(str(src))
    arch = reader.get_field("general.architecture").contents()
    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, {
        f"{arch}.pooling_type": MetadataDetails(gguf.GGUFValueType.UINT32,
                                                POOLING_TYPES[pooling])}, [])
    return dst


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    require("gguf")
    folder = tmp_path_factory.mktemp("embeddings")
    mean = write_random_model(folder / "tiny.gguf", "llama", n_ctx=256, seed=7)
    last = _with_pooling(mean, folder / "tiny-last.gguf", "last")
    return {"tiny": str(mean), "tiny-last": str(last)}


@pytest.fixture(scope="module")
def server(paths):
    from test_server_support import serve, spec

    with serve([spec(name, path) for name, path in paths.items()], parallel=2, n_ctx=N_CTX,
               kv_type="f32") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    from test_server_support import client as openai_client

    with openai_client(server, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def reference(paths):
    """reference(text or ids) -> the reference's final hidden states [n, n_embd], float64."""
    from dasllama.llm import LLM

    ref = reference_llm.ReferenceLLM(paths["tiny"])
    with LLM(paths["tiny"], n_ctx=N_CTX, threads=1) as llm:
        tokenize = llm.tokenize

        def hidden(x):
            ids = tokenize(x) if isinstance(x, str) else list(x)
            cache = reference_llm.KVCache(ref.config, len(ids), ref.dtype)
            h = ref.weights["token_embd.weight"][np.asarray(ids)] * ref.config["embd_scale"]
            pos = np.arange(len(ids))
            for il in range(ref.config["n_layer"]):
                h = ref.block(il, h, pos, cache)
            return reference_llm.rms_norm(h, ref.weights["output_norm.weight"],
                                          ref.config["rms_eps"])
        hidden.tokenize = tokenize
        yield hidden


def _unit(v):
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def _post(server, body):
    import httpx
    return httpx.post(server.url + "/v1/embeddings", json=body, timeout=60)


# =============================================================================================
# Values
# =============================================================================================

def test_float_embedding_is_the_mean_pooled_hidden_state(client, reference):
    r = client.embeddings.create(model="tiny", input=TEXT, encoding_format="float")
    got = np.asarray(r.data[0].embedding)
    h = reference(TEXT)
    assert r.model == "tiny" and r.object == "list" and len(r.data) == 1
    assert r.data[0].index == 0 and got.shape == (h.shape[1],)
    assert r.usage.prompt_tokens == len(reference.tokenize(TEXT)) == r.usage.total_tokens
    assert np.linalg.norm(got) == pytest.approx(1.0, abs=1e-5)
    check("mean-pooled embedding", rel_l2(got, _unit(h.mean(0))), BAR_EMBEDDING,
          rel_l2(_unit(h[-1]), _unit(h.mean(0))))


def test_base64_is_little_endian_float32_of_the_same_vector(server, client):
    floats = _post(server, {"model": "tiny", "input": TEXT, "encoding_format": "float"})
    encoded = _post(server, {"model": "tiny", "input": TEXT, "encoding_format": "base64"})
    assert floats.status_code == encoded.status_code == 200
    raw = base64.b64decode(encoded.json()["data"][0]["embedding"])
    want = np.asarray(floats.json()["data"][0]["embedding"], np.float32)
    assert len(raw) == 4 * want.size
    assert np.array_equal(np.frombuffer(raw, "<f4"), want)
    assert not np.array_equal(np.frombuffer(raw, ">f4"), want)   # the byte order matters
    # The openai SDK asks for base64 by default and decodes it itself.
    sdk = np.asarray(client.embeddings.create(model="tiny", input=TEXT).data[0].embedding)
    assert np.array_equal(sdk.astype(np.float32), want)


def test_several_inputs_and_token_ids(client, reference):
    ids = reference.tokenize(OTHER)
    r = client.embeddings.create(model="tiny", input=[TEXT, OTHER], encoding_format="float")
    assert [d.index for d in r.data] == [0, 1]
    assert r.usage.prompt_tokens == len(reference.tokenize(TEXT)) + len(ids)
    for d, text in zip(r.data, (TEXT, OTHER)):
        check(f"embedding of {text!r}", rel_l2(d.embedding, _unit(reference(text).mean(0))),
              BAR_EMBEDDING, rel_l2(r.data[1 - d.index].embedding,
                                    _unit(reference(text).mean(0))))
    by_ids = client.embeddings.create(model="tiny", input=ids, encoding_format="float")
    assert np.allclose(by_ids.data[0].embedding, r.data[1].embedding, rtol=0, atol=1e-6)
    lists = client.embeddings.create(model="tiny", input=[ids, ids[:2]], encoding_format="float")
    assert len(lists.data) == 2 and lists.usage.prompt_tokens == len(ids) + 2
    check("embedding of a token-id prefix", rel_l2(lists.data[1].embedding,
                                                   _unit(reference(ids[:2]).mean(0))),
          BAR_EMBEDDING, rel_l2(lists.data[0].embedding, _unit(reference(ids[:2]).mean(0))))


def test_pooling_follows_the_file(client, reference):
    r = client.embeddings.create(model="tiny-last", input=TEXT, encoding_format="float")
    h = reference(TEXT)
    check("last-token pooling from {arch}.pooling_type", rel_l2(r.data[0].embedding,
                                                                _unit(h[-1])),
          BAR_EMBEDDING, rel_l2(_unit(h.mean(0)), _unit(h[-1])))


def test_dimensions_equal_to_n_embd_is_accepted(server):
    r = _post(server, {"model": "tiny", "input": TEXT, "dimensions": 64})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"][0]["embedding"]) == 64


def test_concurrent_embeddings_while_generating(server, client, reference):
    """Embedding requests from several threads while completions decode on the same model:
    every answer is right (the scratch forward and the engine's steps do not mix)."""
    want = {t: _unit(reference(t).mean(0)) for t in (TEXT, OTHER)}
    errors, results = [], []

    def embed(text):
        try:
            r = client.embeddings.create(model="tiny", input=text, encoding_format="float")
            results.append((text, np.asarray(r.data[0].embedding)))
        except Exception as e:    # reported below, with the others
            errors.append(e)

    def complete():
        try:
            r = client.completions.create(model="tiny", prompt="once upon", max_tokens=24,
                                          temperature=0)
            results.append(("completion", r.choices[0].text))
        except Exception as e:
            errors.append(e)

    workers = [threading.Thread(target=complete) for _ in range(2)]
    workers += [threading.Thread(target=embed, args=(t,)) for t in (TEXT, OTHER) * 3]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not any(w.is_alive() for w in workers), "a request did not finish within 120 s"
    assert not errors, errors
    vectors = [(t, v) for t, v in results if t != "completion"]
    assert len(vectors) == 6 and len(results) == 8
    for text, v in vectors:
        check(f"concurrent embedding of {text!r}", rel_l2(v, want[text]), BAR_EMBEDDING,
              rel_l2(want[OTHER if text == TEXT else TEXT], want[text]))


# =============================================================================================
# Bad requests
# =============================================================================================

@pytest.mark.parametrize("body, status, field", [
    ({"model": "tiny", "input": TEXT, "dimensions": 32}, 400, "dimensions"),
    ({"model": "tiny", "input": ""}, 400, "input"),
    ({"model": "tiny", "input": [TEXT, ""]}, 400, "input[1]"),
    ({"model": "tiny", "input": []}, 400, "input"),
    ({"model": "tiny", "input": [[]]}, 400, "input"),
    ({"model": "tiny", "input": [1, 100000]}, 400, "input"),
    ({"model": "tiny", "input": [5] * (N_CTX + 1)}, 400, "input"),
    ({"model": "tiny", "input": 12}, 400, "input"),
    ({"model": "tiny", "input": [TEXT, 3]}, 400, "input"),
    ({"model": "tiny", "input": TEXT, "encoding_format": "int8"}, 400, "encoding_format"),
    ({"model": "tiny"}, 400, "input"),
    ({"model": "nope", "input": TEXT}, 404, "model"),
])
def test_bad_bodies_are_named(server, body, status, field):
    r = _post(server, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == field or field in err["message"], err
    # and the server keeps serving
    assert _post(server, {"model": "tiny", "input": TEXT}).status_code == 200


def test_too_long_input_names_both_counts(server):
    r = _post(server, {"model": "tiny", "input": [5] * (N_CTX + 1)})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert str(N_CTX + 1) in message and str(N_CTX) in message
