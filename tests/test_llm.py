"""``--embedder llm:MODEL_ID``: the embedding models of the ``llm`` package, from Python and the
CLI. The model is llm's own ``3-small`` (OpenAI's text-embedding-3-small, llm's built-in
plugin, through the openai SDK), pointed with OPENAI_BASE_URL at the OpenAI-compatible server
of conftest: no plugin of llm's embeds offline without torch or a download."""

import json
import os
import re
import subprocess

import numpy as np
import pytest
from conftest import HYBRIDSQL, letter_counts

from hybridsql.embedding.embedder import LLMProvider, resolve_provider
from hybridsql.errors import EmbeddingError
from hybridsql.indexing.index import HybridIndex


@pytest.fixture
def llm_env(embedding_server, tmp_path, monkeypatch):
    """The environment that sends llm's OpenAI models to the test server, with llm's own
    settings (keys, aliases) in a folder of the test's."""
    env = {
        "OPENAI_BASE_URL": embedding_server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "LLM_USER_PATH": str(tmp_path / "llm"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_an_llm_model_embeds_through_llm(llm_env, embedding_server):
    provider = resolve_provider("llm:3-small")
    assert isinstance(provider, LLMProvider)
    assert provider.model_id == "text-embedding-3-small"  # the alias resolved: vectors' tag
    vectors = provider.embed(["deploy on Monday", "dunning"])
    assert vectors.dtype == np.float32
    assert vectors.tolist() == [letter_counts("deploy on Monday"), letter_counts("dunning")]
    assert provider.dims == 26
    assert embedding_server.texts == ["deploy on Monday", "dunning"]  # no probe: dims was known


def test_an_index_on_an_llm_model_tags_its_vectors_and_searches_by_them(
    llm_env, memory_dir, tmp_path
):
    db = str(tmp_path / "llm.db")
    with HybridIndex(db, embedder="llm:3-small") as idx:
        report = idx.index_folder(str(memory_dir))
        assert report.chunks_embedded == report.chunks_written > 0
        tags = idx.conn.execute("select distinct model_id from vectors").fetchall()
        assert tags == [("text-embedding-3-small",)]
        found = idx.search("staging deploy", mode="semantic", limit=3)
        assert [r.vector_score is not None for r in found] == [True, True, True]


def test_the_cli_indexes_and_searches_with_an_llm_model(llm_env, memory_dir, tmp_path):
    db = str(tmp_path / "cli.db")
    env = dict(os.environ)  # llm_env's settings, and CI's sanitizer runtime (LD_PRELOAD)
    run = [HYBRIDSQL, "index", str(memory_dir), "--db", db, "--embedder", "llm:3-small", "--json"]
    indexed = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert indexed.returncode == 0, indexed.stderr
    assert json.loads(indexed.stdout)["chunks_embedded"] > 0
    run = [HYBRIDSQL, "search", "staging", "--db", db, "--embedder", "llm:3-small", "--json"]
    found = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["mode"] == "hybrid"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("llm:nomic", "llm has no embedding model 'nomic': `llm embed-models` lists them"),
        ("llm:", "the llm embedder needs a model: --embedder llm:MODEL_ID"),
        (
            "openai",
            "the openai embedder needs a model: --embedder openai:MODEL, "
            "HYBRIDSQL_OPENAI_MODEL=MODEL, or model= in Python",
        ),
    ],
)
def test_an_embedder_that_cannot_be_made_says_why(llm_env, monkeypatch, name, message):
    monkeypatch.delenv("HYBRIDSQL_OPENAI_MODEL", raising=False)
    with pytest.raises(EmbeddingError, match=re.escape(message)):
        resolve_provider(name)


def test_a_failing_llm_model_fails_in_one_line(llm_env, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    provider = resolve_provider("llm:3-small")
    with pytest.raises(
        EmbeddingError, match=r"^llm embedding model text-embedding-3-small failed: "
    ):
        provider.embed(["x"])
