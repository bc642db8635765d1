"""Watch mode against real file operations: a real ``hybridsql index DIR --watch`` process (and
the MCP server) while the test saves, renames, moves, deletes and writes hundreds of files. Each
case polls the index until it shows the expected state or its deadline passes."""

import json
import os
import queue
import signal
import subprocess
import threading
import time

import anyio
import apsw
import pytest
from conftest import HYBRIDSQL
from test_mcp import run_session

from hybridsql.indexing.index import HybridIndex, Progress
from hybridsql.indexing.watch import watch_folder

DEADLINE = 60  # seconds a case may take to show in the index, on a loaded machine


def until(check, what: str, deadline: float = DEADLINE):
    """Polls ``check()`` until it returns something true (returned) or the deadline passes."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline} s: {what}; last {value!r}")
        time.sleep(0.05)


def indexed(db: str) -> dict:
    """{path: the file's chunk texts joined} as the index has them now."""
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        conn.set_busy_timeout(5000)
        rows = conn.execute(
            "select f.path, group_concat(c.text, '|') from files f"
            " left join chunks c on c.file_id = f.id group by f.id order by f.path"
        ).fetchall()
    finally:
        conn.close()
    return dict(rows)


class Watching:
    """``hybridsql index FOLDER --db DB --watch --json`` in a subprocess; a thread reads its
    JSON lines (the first run's report, one per batch, the summary)."""

    def __init__(self, folder, db, embedder="none", env=None, args=()):
        self.process = subprocess.Popen(
            [HYBRIDSQL, "index", str(folder), "--db", db, "--embedder", embedder, "--watch", *args],
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.first = self.next()  # the watcher started before this run

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self):
        try:
            line = self.lines.get(timeout=DEADLINE)
        except queue.Empty:
            raise AssertionError(f"no line within {DEADLINE} s") from None
        assert line is not None, self.process.stderr.read()
        return line

    def stop(self, sig=signal.SIGINT):
        """Sends ``sig``; returns (exit status, the batch lines, the summary, stderr)."""
        self.process.send_signal(sig)
        status = self.process.wait(DEADLINE)
        lines = []
        while (line := self.lines.get(timeout=DEADLINE)) is not None:
            lines.append(line)
        return status, lines[:-1], lines[-1], self.process.stderr.read()

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.fixture
def notes(tmp_path):
    folder = tmp_path / "notes"
    (folder / "team").mkdir(parents=True)
    (folder / "a.md").write_text("# A\n\nalpha first draft\n")
    (folder / "team" / "x.md").write_text("# X\n\nxylophone lessons on Tuesday\n")
    (folder / "team" / "y.md").write_text("# Y\n\nyodel practice on Friday\n")
    return folder


def test_an_atomic_save_is_indexed_and_its_temporary_file_never_is(tmp_path, notes):
    db = str(tmp_path / "mem.db")
    watching = Watching(notes, db)
    try:
        assert watching.first["files_indexed"] == 3
        temp = notes / ".a.md.swp"  # as editors do: write aside, then rename over
        temp.write_text("# A\n\nalpha second draft, saved\n")
        os.replace(temp, notes / "a.md")
        until(lambda: "saved" in indexed(db)["a.md"], "the saved text in the index")
        also = notes / "a.md~"  # a backup file no pattern takes
        also.write_text("# A\n\nbackup\n")
        (notes / "b.md").write_text("# B\n\nbravo\n")
        until(lambda: "b.md" in indexed(db), "b.md in the index")
        assert sorted(indexed(db)) == ["a.md", "b.md", "team/x.md", "team/y.md"]
        status, batches, summary, err = watching.stop(signal.SIGTERM)
    finally:
        watching.kill()
    assert status == 0, err
    assert summary["batches"] == len(batches) >= 2
    assert summary["files_indexed"] == sum(b["files_indexed"] for b in batches) == 2
    assert err.splitlines() == [f"hybridsql: watching {notes} (Ctrl-C to stop)"]


def test_the_per_file_size_cap_is_an_option_that_the_watch_keeps(tmp_path, notes):
    """--max-file-bytes: a file over it is left out of the first run, with its reason, and of
    every batch of the watch; one under it is indexed (the cap was 20 MiB, fixed)."""
    (notes / "big.md").write_text("# Big\n\n" + "bulky words " * 20 + "\n")
    db = str(tmp_path / "mem.db")
    watching = Watching(notes, db, args=("--max-file-bytes", "100"))
    try:
        assert watching.first["files_indexed"] == 3
        big = (notes / "big.md").stat().st_size
        assert watching.first["skipped"] == [["big.md", f"larger than 100 bytes ({big})"]]
        (notes / "later.md").write_text("# Later\n\n" + "grown words " * 20 + "\n")
        (notes / "small.md").write_text("# Small\n\nsmall enough\n")
        until(lambda: "small.md" in indexed(db), "small.md in the index")
        assert sorted(indexed(db)) == ["a.md", "small.md", "team/x.md", "team/y.md"]
        status, batches, _, err = watching.stop()
    finally:
        watching.kill()
    assert status == 0, err
    skipped = [entry for batch in batches for entry in batch["skipped"]]
    later = (notes / "later.md").stat().st_size
    assert ["later.md", f"larger than 100 bytes ({later})"] in skipped


def test_a_moved_folder_is_not_embedded_again_and_a_delete_leaves(
    tmp_path, notes, embedding_server
):
    db = str(tmp_path / "mem.db")
    env = {
        "HYBRIDSQL_OPENAI_BASE_URL": embedding_server.base_url,
        "HYBRIDSQL_OPENAI_MODEL": "letters",
    }
    watching = Watching(notes, db, embedder="openai", env=env)
    try:
        embedded = len(embedding_server.texts)
        before = indexed(db)
        os.rename(notes / "team", notes / "crew")
        until(
            lambda: sorted(indexed(db)) == ["a.md", "crew/x.md", "crew/y.md"],
            "the moved files under their new paths",
        )
        assert indexed(db)["crew/x.md"] == before["team/x.md"]
        (notes / "crew" / "y.md").unlink()
        until(lambda: sorted(indexed(db)) == ["a.md", "crew/x.md"], "y.md out of the index")
        status, batches, summary, err = watching.stop(signal.SIGINT)
    finally:
        watching.kill()
    assert status == 0, err
    assert len(embedding_server.texts) == embedded  # the embedding cache had every chunk
    assert summary["chunks_embedded"] == 2  # from the cache, as the moved files were written
    assert summary["files_deleted"] == 3  # team/x.md, team/y.md, then crew/y.md


def test_gitignore_and_globs_are_honoured_as_they_change(tmp_path, notes):
    db = str(tmp_path / "mem.db")
    watching = Watching(notes, db)
    try:
        (notes / ".gitignore").write_text("drafts/\n")
        (notes / "drafts").mkdir()
        (notes / "drafts" / "d.md").write_text("# D\n\ndraft\n")
        (notes / "c.txt").write_text("not markdown\n")
        (notes / "c.md").write_text("# C\n\ncharlie\n")
        until(lambda: "c.md" in indexed(db), "c.md in the index")
        assert sorted(indexed(db)) == ["a.md", "c.md", "team/x.md", "team/y.md"]
        (notes / ".gitignore").write_text("drafts/\nteam/\n")
        until(lambda: sorted(indexed(db)) == ["a.md", "c.md"], "team/ left out")
    finally:
        watching.kill()


def test_a_burst_of_500_files_is_one_batch(tmp_path, notes):
    """As a git checkout does: 500 files written at once are indexed in one run, not 500."""
    db = str(tmp_path / "mem.db")
    watching = Watching(notes, db)
    try:
        (notes / "burst").mkdir()
        for i in range(500):
            (notes / "burst" / f"{i:03}.md").write_text(f"# Note {i}\n\nburst number{i}\n")
        until(lambda: len(indexed(db)) == 503, "the 500 files in the index")
        status, batches, summary, err = watching.stop()
    finally:
        watching.kill()
    assert status == 0, err
    assert [b["files_indexed"] for b in batches] == [500]
    assert summary["batches"] == 1


class Vanishing(Progress):
    """Deletes a file just before index_folder reads it, once armed."""

    def __init__(self, folder):
        self.folder = folder
        self.armed = False

    def update(self, done, label):
        if self.armed and label == "gone.md":
            (self.folder / label).unlink()


def test_a_file_that_vanishes_before_it_is_read_leaves_the_index(tmp_path, notes):
    db = str(tmp_path / "mem.db")
    (notes / "gone.md").write_text("# Gone\n\nsoon gone\n")
    progress, stop, ready, batches = Vanishing(notes), threading.Event(), threading.Event(), []
    failed = []

    def run():
        try:
            with HybridIndex(db, embedder="none") as idx:
                watch_folder(
                    idx,
                    str(notes),
                    stop,
                    progress,
                    on_ready=lambda r: ready.set(),
                    on_batch=batches.append,
                )
        except BaseException as e:
            failed.append(e)
            ready.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert ready.wait(DEADLINE) and not failed
        assert "gone.md" in indexed(db)
        progress.armed = True
        with open(notes / "gone.md", "a") as f:
            f.write("changed\n")
        until(lambda: batches, "a batch")
    finally:
        stop.set()
        thread.join(DEADLINE)
    assert not failed
    assert batches[0].skipped == [["gone.md", "vanished while indexing"]]
    assert batches[0].files_deleted == 1
    assert sorted(indexed(db)) == ["a.md", "team/x.md", "team/y.md"]


def test_the_mcp_server_answers_while_it_reindexes_a_saved_note(tmp_path, notes, embedding_server):
    """The server watches its memory folder: a note saved while it runs is indexed in the
    background (its batch held by the embedding server), and searches are answered meanwhile."""
    env = {
        "HYBRIDSQL_OPENAI_BASE_URL": embedding_server.base_url,
        "HYBRIDSQL_OPENAI_MODEL": "letters",
    }

    async def steps(client, session):
        await client.indexed()
        embedding_server.hold = "zebra"
        (notes / "team" / "z.md").write_text("# Z\n\nzebra crossing on Main Street\n")
        with anyio.fail_after(DEADLINE):
            await anyio.to_thread.run_sync(embedding_server.holding.wait)
            during = await client.call("search_memory", query="xylophone")
            held = await client.call("search_memory", query="crossing Main Street")
        embedding_server.release.set()
        with anyio.fail_after(DEADLINE):
            while True:
                after = await client.call("search_memory", query="crossing Main Street")
                if "team/z.md" in [d["path"] for d in after["documents"]]:
                    return during, held, after
                await anyio.sleep(0.05)

    during, held, after = run_session(
        str(tmp_path / "mcp.db"), notes, steps, embedder="openai", env=env
    )
    assert during["documents"][0]["path"] == "team/x.md"
    assert "team/z.md" not in [d["path"] for d in held["documents"]]
    assert after["documents"][0]["path"] == "team/z.md"
