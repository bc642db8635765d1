"""The pipelined indexer (a thread reads and chunks ahead, the provider embeds in another, the
files are written in order) gives exactly the chunks and vectors of cutting and embedding one
file at a time, and reads a bounded number of files ahead of those written."""

import shutil
import threading
import time

import numpy as np
from conftest import EXAMPLES, letter_counts

import hybridsql.indexing.index
from hybridsql.embedding.embedder import LocalProvider
from hybridsql.files.chunking import chunk_markdown
from hybridsql.files.discovery import Progress, discover, is_markdown
from hybridsql.indexing.index import EMBED_BATCH, READ_AHEAD, HybridIndex


def test_the_pipeline_gives_the_chunks_and_vectors_of_one_file_at_a_time(tmp_path):
    notes = tmp_path / "notes"
    shutil.copytree(EXAMPLES, notes)
    with HybridIndex(str(tmp_path / "m.db"), embedder="local") as idx:
        idx.index_folder(str(notes))
        rows = idx.conn.execute(
            "select c.path, c.start_line, c.end_line, c.heading, c.text, v.vector from chunks c"
            " join vectors v on v.chunk_id = c.id order by c.id"
        ).fetchall()
        most, overlap, counter = idx.chunking()
    provider = LocalProvider(threads=1)
    expected = []
    for rel in discover(str(notes)):
        text = (notes / rel).read_text()
        for chunk in chunk_markdown(text, most, overlap, counter, headings=is_markdown(rel)):
            vector = provider.embed([chunk.text])[0].astype("<f4").tobytes()
            expected.append(
                (rel, chunk.start_line, chunk.end_line, chunk.heading, chunk.text, vector)
            )
    assert len(rows) == len(expected) > 2 * EMBED_BATCH // 4  # several batches
    assert [r[:5] for r in rows] == [e[:5] for e in expected]
    assert [r[5] for r in rows] == [e[5] for e in expected]  # bit for bit


class Slow:
    """A provider that takes its time, so that an unbounded reader would read every file."""

    model_id = "slow-letters"
    dims = 26

    def embed(self, texts):
        time.sleep(0.05)
        return np.array([letter_counts(t) for t in texts], dtype=np.float32)


class Finished(Progress):
    def __init__(self):
        self.done = 0

    def update(self, done, label):
        self.done = max(self.done, done)


def test_files_are_read_a_bounded_number_ahead_of_those_written(tmp_path, monkeypatch):
    notes = tmp_path / "notes"
    notes.mkdir()
    count = 400
    for i in range(count):
        (notes / f"n{i:03}.md").write_text(f"# Note {i}\n\nword{i} of note {i}\n")
    progress, ahead, lock = Finished(), [], threading.Lock()
    real_read = hybridsql.indexing.index.read_markdown
    read = 0

    def reading(*args):
        nonlocal read
        with lock:
            read += 1
            ahead.append(read - progress.done)
        return real_read(*args)

    monkeypatch.setattr(hybridsql.indexing.index, "read_markdown", reading)
    with HybridIndex(str(tmp_path / "m.db"), embedder=Slow()) as idx:
        report = idx.index_folder(str(notes), progress=progress)
    assert report.files_indexed == count
    # Read ahead of the files written: the batch being embedded, the one being gathered, and
    # the reader's queue; never the folder.
    assert max(ahead) <= 2 * EMBED_BATCH + READ_AHEAD + 2 < count, max(ahead)
