"""Shared fixtures: fresh databases with hybridsql loaded, a memory folder from examples/, and
the SciFact records vendored in tests/data/scifact."""

import gzip
import json
import os
import shutil
import sys
from itertools import islice

import pytest

import hybridsql

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "memory")
SCIFACT = os.path.join(ROOT, "tests", "data", "scifact")
# The installed command. Not `python -m hybridsql`: from the checkout, that would import the
# source tree (uncompiled in a clean clone) instead of the installed package.
HYBRIDSQL = os.path.join(os.path.dirname(sys.executable), "hybridsql")


def read_scifact(name, count):
    """The first count records of SciFact's corpus or queries, as tests/data/scifact holds them."""
    with gzip.open(os.path.join(SCIFACT, f"{name}.jsonl.gz"), "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in islice(f, count)]
    assert len(records) == count, f"tests/data/scifact/{name}.jsonl.gz has {len(records)} lines"
    return records


@pytest.fixture
def fresh_db(tmp_path):
    """An apsw connection to a new database file with the native extension loaded."""
    conn = hybridsql.connect(str(tmp_path / "fresh.db"), backend="extension")
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def example_db(tmp_path_factory):
    """Path of a closed database with examples/memory indexed on the local model.

    Copy it before writing to it; its embedding cache makes re-indexing the examples instant.
    """
    from hybridsql.index import HybridIndex

    path = str(tmp_path_factory.mktemp("examples") / "examples.db")
    with HybridIndex(path, embedder="local") as idx:
        idx.index_folder(EXAMPLES)
    return path


@pytest.fixture
def memory_dir(tmp_path):
    """A writable copy of the example memory folder."""
    dest = tmp_path / "memory-folder"
    shutil.copytree(EXAMPLES, dest)
    return dest
