"""A stopped run resumes where it stopped: ``hybridsql index`` stopped by SIGINT or SIGKILL
while a batch is being embedded, then run again, embeds every chunk exactly once in all, and a
search during the run sees the files done so far. The embedding server (conftest) counts the
texts it answers and holds the batch that has a chosen text, so the stop comes at a known point.
"""

import json
import os
import signal
import subprocess
from collections import Counter

import numpy as np
import pytest
from conftest import DEADLINE, HYBRIDSQL, letter_counts, run_hybridsql, spawned

from hybridsql.indexing.index import HybridIndex

FILES = 200
HELD = 150  # the file whose batch (files 128 to 191, 64 chunks a batch) the server holds
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def note(i: int) -> str:
    """File i's text: one chunk, unlike every other file's."""
    words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(6))
    return f"# Note {i}\n\nnumber{i} {words} marker{i}\n"


@pytest.fixture
def notes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(FILES):
        (folder / f"n{i:03}.md").write_text(note(i))
    return folder


def chunk_texts(db) -> set:
    with HybridIndex(db, embedder="none", readonly=True) as idx:
        return {t for (t,) in idx.conn.execute("select text from chunks")}


def files_indexed(db) -> int:
    with HybridIndex(db, embedder="none", readonly=True) as idx:
        return idx.conn.execute("select count(*) from files").fetchone()[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_stopped_run_resumes_and_embeds_no_chunk_twice(tmp_path, notes, embedding_server, sig):
    db = str(tmp_path / "mem.db")
    env = {
        **os.environ,
        "HYBRIDSQL_OPENAI_BASE_URL": embedding_server.base_url,
        "HYBRIDSQL_OPENAI_MODEL": "letters",
    }
    embedding_server.hold = f"marker{HELD}"
    with spawned(
        [HYBRIDSQL, "index", str(notes), "--db", db, "--embedder", "openai", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as run:
        # Its output is read only once it has ended (the held request would keep it waiting).
        assert embedding_server.holding.wait(DEADLINE), "the third batch was never asked for"
        # Two batches of 64 files were written, each file in its own transaction, before the
        # third was sent: a search now sees them and not the files after.
        assert files_indexed(db) == 128
        seen = run_hybridsql("search", "number5", "--db", db, "--mode", "keyword", "--json")
        assert [r["path"] for r in json.loads(seen.stdout)["results"]] == ["n005.md"]
        unseen = run_hybridsql("search", "number150", "--db", db, "--mode", "keyword", "--json")
        assert json.loads(unseen.stdout)["results"] == []
        run.send_signal(sig)
        assert run.wait(DEADLINE) == (130 if sig == signal.SIGINT else -signal.SIGKILL)
    if sig == signal.SIGINT:
        assert files_indexed(db) == 128
    embedding_server.hold = None  # the held request is never answered: its texts not embedded
    again = run_hybridsql(
        "index",
        str(notes),
        "--db",
        db,
        "--embedder",
        "openai",
        "--json",
        HYBRIDSQL_OPENAI_BASE_URL=embedding_server.base_url,
        HYBRIDSQL_OPENAI_MODEL="letters",
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["files_unchanged"], report["files_indexed"]) == (128, FILES - 128)
    assert report["warnings"] == []
    texts = chunk_texts(db)
    assert len(texts) == FILES
    embedded = Counter(t for t in embedding_server.texts if t in texts)
    assert set(embedded) == texts
    assert set(embedded.values()) == {1}  # no chunk embedded twice


class Letters:
    """A provider with its own window (chunks are cut to fit it) that counts what it embeds and
    is interrupted (KeyboardInterrupt, as Ctrl-C) on its call number ``stop_at``."""

    model_id = "letters-window"
    dims = 26

    def __init__(self, window: int, stop_at: int | None = None):
        self.window = window
        self.revision = str(window)  # vectors of another chunk size are not taken from the cache
        self.stop_at = stop_at
        self.calls = 0
        self.texts = []

    def embed(self, texts):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        self.texts += texts
        return np.array([letter_counts(t) for t in texts], dtype=np.float32)


def test_a_first_run_stopped_half_way_is_not_chunked_again(tmp_path, notes):
    """The chunk size was recorded only at the end of a run: a first run stopped half way left
    the default recorded, and the next one warned 'were 400' and cut every file again."""
    db = str(tmp_path / "mem.db")
    first = Letters(100, stop_at=3)
    with HybridIndex(db, embedder=first) as idx, pytest.raises(KeyboardInterrupt):
        idx.index_folder(str(notes))
    second = Letters(100)
    with HybridIndex(db, embedder=second) as idx:
        report = idx.index_folder(str(notes))
    assert report.warnings == []
    assert (report.files_unchanged, report.files_indexed) == (128, FILES - 128)
    assert not set(first.texts) & set(second.texts)
    assert len(first.texts + second.texts) == FILES


def test_a_new_chunk_size_stopped_half_way_resumes(tmp_path, notes):
    """A run that cuts an index's files to a new size, stopped half way, is resumed by the next
    run: the files it cut are not cut again, and only it warns."""
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder=Letters(100)) as idx:
        assert idx.index_folder(str(notes)).files_indexed == FILES
    stopped = Letters(60, stop_at=3)
    with HybridIndex(db, embedder=stopped) as idx, pytest.raises(KeyboardInterrupt):
        idx.index_folder(str(notes))
    resumed = Letters(60)
    with HybridIndex(db, embedder=resumed) as idx:
        report = idx.index_folder(str(notes))
        tokens = idx.conn.execute("select value from meta where key = 'chunk_tokens'").fetchone()
    assert report.warnings == []
    assert (report.files_unchanged, report.files_indexed) == (128, FILES - 128)
    assert tokens == (58,)
    assert not set(stopped.texts) & set(resumed.texts)
