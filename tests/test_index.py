"""Indexing a memory folder: chunks, incremental updates, deletes, interruptions, output."""

import json
import os
import re
import shutil
import threading

import apsw
import pytest
from conftest import check_fts, run_hybridsql

import hybridsql.indexing.index
from hybridsql.embedding.embedder import Embedder, LocalProvider
from hybridsql.errors import DatabaseError
from hybridsql.indexing.index import VANISHED, HybridIndex, Progress, discover


class Counting:
    """Passes through to the real local model and records every text it is asked to embed."""

    def __init__(self, inner=None, fail_after=None):
        self.inner = inner or LocalProvider()
        self.model_id, self.dims = self.inner.model_id, self.inner.dims
        self.texts = []
        self.fail_after = fail_after

    def __getattr__(self, name):  # window, count_tokens, revision: the model's own
        return getattr(self.inner, name)

    def embed(self, texts):
        if self.fail_after is not None and len(self.texts) + len(texts) > self.fail_after:
            raise RuntimeError("the provider went away")
        self.texts.extend(texts)
        return self.inner.embed(texts)


def fresh_index(tmp_path, example_db, provider=None):
    db = str(tmp_path / "mem.db")
    shutil.copy(example_db, db)
    # Deleted through the model's Embedder, the chunks' vectors go into the embedding cache.
    idx = HybridIndex(db, embedder="local")
    with idx.conn:
        idx.conn.execute("delete from files")  # keep only the embedding cache
    idx.close()
    provider = provider or Counting()
    idx = HybridIndex(db, embedder=None)
    idx.embedder = Embedder(provider, idx.conn)
    idx.searcher.embedder = idx.embedder
    return idx, provider


def consistent(conn):
    assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    check_fts(conn)
    orphans = conn.execute(
        "select count(*) from vectors where chunk_id not in (select id from chunks)"
    ).fetchone()[0]
    assert orphans == 0


def test_discovers_every_markdown_file_but_hidden_ones(memory_dir):
    (memory_dir / ".git").mkdir()
    (memory_dir / ".git" / "notes.md").write_text("# hidden")
    (memory_dir / "image.png").write_bytes(b"\x89PNG")
    found = discover(str(memory_dir))
    assert "MEMORY.md" in found
    assert "memory/projects/billing/2026-09-14.md" in found
    assert "notes/architecture.md" in found
    assert not any(p.startswith(".git") or p.endswith(".png") for p in found)
    assert found == sorted(found)


def test_index_chunks_with_lines_and_vectors(tmp_path, example_db, memory_dir):
    idx, provider = fresh_index(tmp_path, example_db)
    report = idx.index_folder(str(memory_dir))
    assert report.files_seen == report.files_indexed == len(discover(str(memory_dir)))
    assert provider.texts == []  # every chunk text came from the cache
    rows = idx.conn.execute(
        "select c.path, c.start_line, c.end_line, c.text, v.model_id from chunks c"
        " join vectors v on v.chunk_id = c.id"
    ).fetchall()
    assert len(rows) == report.chunks_written == report.chunks_embedded
    lines = (memory_dir / "MEMORY.md").read_text().split("\n")
    for path, start, end, text, model in rows:
        assert model == "all-MiniLM-L6-v2-int8"
        assert 1 <= start <= end
        if path == "MEMORY.md":
            assert text == "\n".join(lines[start - 1 : end])
    consistent(idx.conn)


def test_incremental_only_changed_files_and_new_chunks(tmp_path, example_db, memory_dir):
    idx, provider = fresh_index(tmp_path, example_db)
    idx.index_folder(str(memory_dir))
    again = idx.index_folder(str(memory_dir))
    assert (again.files_indexed, again.files_unchanged) == (0, again.files_seen)
    note = memory_dir / "memory" / "2026-11-20.md"
    note.write_text(note.read_text() + "\n\n## Late addition\nThe zebrafish fixture is flaky.\n")
    third = idx.index_folder(str(memory_dir))
    assert third.files_indexed == 1
    assert len(provider.texts) == 1 and "zebrafish" in provider.texts[0]
    found = idx.search("zebrafish fixture", mode="keyword")
    assert [r.path for r in found] == ["memory/2026-11-20.md"]
    consistent(idx.conn)


def test_deleted_files_leave_the_results(tmp_path, example_db, memory_dir):
    idx, _ = fresh_index(tmp_path, example_db)
    idx.index_folder(str(memory_dir))
    assert any(r.path == "memory/2026-08-19.md" for r in idx.search("ERR_CONN_RESET"))
    os.remove(memory_dir / "memory" / "2026-08-19.md")
    report = idx.index_folder(str(memory_dir))
    assert report.files_deleted == 1
    assert all(r.path != "memory/2026-08-19.md" for r in idx.search("ERR_CONN_RESET"))
    consistent(idx.conn)


def test_an_interrupted_run_leaves_a_consistent_index_and_resumes(tmp_path, example_db, memory_dir):
    for i in range(6):
        (memory_dir / f"fresh-{i}.md").write_text(
            f"# Fresh {i}\n\nUnseen note number {i} about kelp.\n"
        )
    idx, _ = fresh_index(tmp_path, example_db, Counting(fail_after=0))
    with pytest.raises(RuntimeError, match="the provider went away"):
        idx.index_folder(str(memory_dir))
    consistent(idx.conn)
    written = idx.conn.execute("select count(*) from files").fetchone()[0]
    complete = idx.conn.execute(
        "select count(*) from chunks c left join vectors v on v.chunk_id = c.id"
        " where v.chunk_id is null"
    ).fetchone()[0]
    assert complete == 0  # no file is half-written: its chunks all have vectors
    idx.embedder.provider.fail_after = None
    report = idx.index_folder(str(memory_dir))
    assert report.files_indexed == report.files_seen - written
    assert len(idx.search("kelp", mode="keyword")) == 6
    consistent(idx.conn)


def test_skips_binary_and_huge_files_with_a_message(tmp_path, example_db, memory_dir):
    (memory_dir / "blob.md").write_bytes(b"\x00\x01binary")
    (memory_dir / "big.md").write_text("x" * 5000)
    (memory_dir / "latin1.md").write_bytes(
        "caf\xe9 notes about the espresso machine".encode("latin-1")
    )
    idx, _ = fresh_index(tmp_path, example_db)
    report = idx.index_folder(str(memory_dir), max_file_bytes=4096)
    assert ["blob.md", "binary (has NUL bytes)"] in report.skipped
    assert ["big.md", "larger than 4096 bytes (5000)"] in report.skipped
    assert ["latin1.md", "invalid UTF-8 at byte 3, replaced with U+FFFD"] in report.warnings
    assert [w for w in report.warnings if w[0] == "latin1.md"] == [
        ["latin1.md", "invalid UTF-8 at byte 3, replaced with U+FFFD"]
    ]
    assert [r.path for r in idx.search("espresso", mode="keyword")] == ["latin1.md"]


def test_keyword_only_without_a_provider(tmp_path, memory_dir):
    with HybridIndex(str(tmp_path / "k.db"), embedder="none") as idx:
        report = idx.index_folder(str(memory_dir))
        assert report.chunks_embedded == 0
        found = idx.search("ERR_CONN_RESET")
        assert found.mode == "keyword"
        assert found.notes == ["no embedding provider is configured: keyword-only search"]
        assert "memory/2026-08-19.md" in [r.path for r in found]


def test_a_files_chunks_go_in_by_one_statement_not_one_each(tmp_path):
    """A file's chunks are inserted many to a statement: FTS5 writes what it holds in memory as
    a new segment at each statement's savepoint, so a statement a chunk wrote a segment a chunk
    (and merged them again and again). The index is whole, each chunk where its section is."""
    folder = tmp_path / "notes"
    folder.mkdir()
    words = "deploy cache rollback gateway ledger harbor invoice parcel tide worker".split()
    sections = [
        f"# Section {i}\n\n" + " ".join(words[(i + j) % 10] for j in range(120)) + f" s{i}\n"
        for i in range(150)
    ]
    (folder / "long.md").write_text("\n".join(sections))
    with HybridIndex(str(tmp_path / "k.db"), embedder="none") as idx:
        writes = []
        idx.conn.set_profile(
            lambda sql, _ns: (
                writes.append(sql)
                if sql.startswith("REPLACE INTO 'main'.'chunks_fts_data'")
                else None
            )
        )
        idx.index_folder(str(folder))
        idx.conn.set_profile(None)
        rows = idx.conn.execute("select heading, text from chunks order by id").fetchall()
        assert len(rows) >= 150 and len(writes) < len(rows) / 5
        for i in (0, 77, 149):
            found = [r.heading for r in idx.search(f"s{i}", mode="keyword")]
            assert found == [f"Section {i}"]
        consistent(idx.conn)


def test_cli_index_is_quiet_json_when_piped(tmp_path, memory_dir):
    db = str(tmp_path / "cli.db")
    out = run_hybridsql("index", str(memory_dir), "--db", db, "--embedder", "none")
    assert out.returncode == 0 and out.stderr == ""
    report = json.loads(out.stdout)
    assert report["files_indexed"] == report["files_seen"] > 20


def test_terminal_snippets_are_bold_and_cut_cleanly():
    from hybridsql.terminal import snippet_line

    assert snippet_line("a <mark>Python</mark>\nrule", bold=True) == "a \x1b[1mPython\x1b[0m rule"
    cut = snippet_line("x" * 8 + "<mark>code</mark> tail", width=10, bold=True)
    assert cut == "x" * 8 + "\x1b[1mco\x1b[0m"
    assert snippet_line("a <mark>Python</mark>\nrule", bold=False) == "a Python rule"


def test_cli_errors_are_messages_not_tracebacks(tmp_path):
    out = run_hybridsql("index", str(tmp_path / "missing"), "--db", str(tmp_path / "x.db"))
    assert out.returncode == 1
    assert out.stderr == f"hybridsql: {tmp_path / 'missing'} is not a folder\n"
    out = run_hybridsql("search", "x", "--db", str(tmp_path / "x.db"), "--pool", "0")
    assert out.returncode == 1
    assert out.stderr == "hybridsql: candidate_pool must be an integer from 1 to 10000, not 0\n"
    assert not (tmp_path / "x.db").exists()


# -- files that change while they are indexed ------------------------------------------------


class OnFile(Progress):
    """A progress bar that does something to the folder just before file ``n`` is read: the
    ``n``th file named (a file is named before it is read, and again once it is written)."""

    def __init__(self, n, action):
        self.n, self.action, self.named = n, action, []

    def update(self, done, label):
        if label and label not in self.named:
            self.named.append(label)
            if len(self.named) == self.n:
                self.action(label)


def small_folder(root, count=6):
    root.mkdir()
    for i in range(count):
        (root / f"n{i}.md").write_text(f"# note {i}\n\nnotetoken{i}\n")
    return root


def texts(idx):
    return " ".join(t for (t,) in idx.conn.execute("select text from chunks"))


def test_a_file_deleted_before_it_is_read_is_skipped(tmp_path):
    root = small_folder(tmp_path / "folder")
    with HybridIndex(str(tmp_path / "index.db"), embedder="none") as idx:
        report = idx.index_folder(
            str(root), progress=OnFile(3, lambda name: os.remove(root / name))
        )
        assert report.skipped == [["n2.md", VANISHED]]
        assert report.files_indexed == 5 and "notetoken2" not in texts(idx)
        # Indexed before, then deleted while the next run is under way: it leaves the index.
        (root / "n2.md").write_text("# note 2\n\nnotetoken2\n")
        assert idx.index_folder(str(root)).files_indexed == 1
        report = idx.index_folder(
            str(root), progress=OnFile(3, lambda name: os.remove(root / name))
        )
        assert report.skipped == [["n2.md", VANISHED]] and report.files_deleted == 1
        assert "notetoken2" not in texts(idx)


def test_a_file_deleted_after_it_is_read_is_indexed_as_read(tmp_path, monkeypatch):
    """Deleted while its text is chunked: it is indexed as it was read, with the time of the
    file it was read from (os.path.getmtime after chunking used to stop the run), and the next
    run removes it."""
    root = small_folder(tmp_path / "folder")
    real_chunk = hybridsql.indexing.index.chunk_markdown

    def chunk(text, *args, **kwargs):
        if "notetoken2" in text and (root / "n2.md").exists():
            os.remove(root / "n2.md")
        return real_chunk(text, *args, **kwargs)

    monkeypatch.setattr(hybridsql.indexing.index, "chunk_markdown", chunk)
    with HybridIndex(str(tmp_path / "index.db"), embedder="none") as idx:
        report = idx.index_folder(str(root))
        assert (report.files_indexed, report.skipped) == (6, [])
        assert "notetoken2" in texts(idx)
        assert idx.index_folder(str(root)).files_deleted == 1


def test_a_file_deleted_while_the_folder_is_walked_is_skipped(tmp_path, monkeypatch):
    """Between os.walk listing a folder and discover() asking what each entry is."""
    root = small_folder(tmp_path / "folder")
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if str(path).endswith("n4.md") and os.path.exists(path):
            os.remove(path)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    with HybridIndex(str(tmp_path / "index.db"), embedder="none") as idx:
        report = idx.index_folder(str(root))
    assert report.skipped == [["n4.md", VANISHED]]
    assert (report.files_seen, report.files_indexed) == (5, 5)


@pytest.mark.parametrize("run", range(3))
def test_files_deleted_by_another_thread_while_indexing(tmp_path, run):
    """A real race: a thread deletes the folder's last files while the first are indexed."""
    root = small_folder(tmp_path / "folder", count=300)
    names = sorted(os.listdir(root))
    started = threading.Event()

    def delete():
        started.wait()
        for name in reversed(names[50:]):
            os.remove(root / name)

    deleter = threading.Thread(target=delete)
    deleter.start()
    with HybridIndex(str(tmp_path / "index.db"), embedder="none") as idx:
        report = idx.index_folder(str(root), progress=OnFile(1, lambda _: started.set()))
        deleter.join()
        assert {why for _, why in report.skipped} == {VANISHED}
        assert report.files_indexed + len(report.skipped) == report.files_seen == 300
        indexed = {p for (p,) in idx.conn.execute("select path from files")}
        assert indexed.isdisjoint(p for p, _ in report.skipped)
        consistent(idx.conn)


def test_a_file_swapped_for_a_link_after_discovery_is_not_read(tmp_path):
    """The docs say links are skipped: at read time too, for the file and for its folders."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.md").write_text("# secret\n\noutsidetoken\n")
    (outside / "sub" / "n0.md").write_text("# secret\n\noutsidetoken\n")
    root = small_folder(tmp_path / "folder")
    (root / "sub").mkdir()
    (root / "sub" / "n0.md").write_text("# sub\n\nsubtoken\n")

    def to_link(name):
        os.remove(root / name)
        os.symlink(outside / "secret.md", root / name)

    def folder_to_link(_):
        shutil.rmtree(root / "sub")
        os.symlink(outside / "sub", root / "sub")

    def to_pipe(name):
        os.remove(root / name)
        os.mkfifo(root / name)

    with HybridIndex(str(tmp_path / "index.db"), embedder="none") as idx:
        report = idx.index_folder(str(root), progress=OnFile(2, to_link))
        assert report.skipped == [["n1.md", "n1.md is a symbolic link (links are not followed)"]]
        assert "outsidetoken" not in texts(idx)
        os.remove(root / "n1.md")
        (root / "n1.md").write_text("# note 1\n\nnotetoken1\n")
    with HybridIndex(str(tmp_path / "index2.db"), embedder="none") as idx:
        report = idx.index_folder(str(root), progress=OnFile(7, folder_to_link))
        assert report.skipped == [["sub/n0.md", "sub is a symbolic link (links are not followed)"]]
        assert report.files_indexed == 6 and "outsidetoken" not in texts(idx)
    with HybridIndex(str(tmp_path / "index3.db"), embedder="none") as idx:
        report = idx.index_folder(str(root), progress=OnFile(1, to_pipe))
        assert report.skipped == [
            ["sub", "sub is a symbolic link (links are not followed)"],  # since the last run
            ["n0.md", "not a regular file (a named pipe)"],
        ]


# -- read-only opening -----------------------------------------------------------------------


def test_a_read_only_index_writes_nothing(tmp_path, example_db):
    db = tmp_path / "index.db"
    shutil.copy(example_db, db)
    before = db.read_bytes()
    with HybridIndex(str(db), embedder="local", readonly=True) as idx:
        found = idx.search("how should python code be indented?")
        assert found.mode == "hybrid" and found.results
        assert idx.embedder.conn is None  # the query's vector is not cached in the file
        with pytest.raises(apsw.ReadOnlyError):
            idx.conn.execute("delete from files")
    assert db.read_bytes() == before


def test_only_an_index_is_opened_and_only_writing_creates_one(tmp_path):
    other = tmp_path / "other.db"
    conn = apsw.Connection(str(other))
    conn.execute("create table t(x); insert into t values (1)")
    conn.close()
    before = other.read_bytes()
    for readonly in (True, False):
        with pytest.raises(DatabaseError, match=re.escape(f"{other} is not a hybridsql index")):
            HybridIndex(str(other), embedder="none", readonly=readonly, create=False)
    assert other.read_bytes() == before  # not even switched to WAL
    missing = tmp_path / "missing.db"
    with pytest.raises(DatabaseError, match=re.escape(f"{missing} does not exist")):
        HybridIndex(str(missing), embedder="none", readonly=True)
    assert not missing.exists()
    HybridIndex(str(missing), embedder="none").close()  # a writing open creates it
    HybridIndex(str(missing), embedder="none", readonly=True).close()


def test_a_run_that_another_run_overtook_does_not_write_the_file_again(tmp_path):
    """Two runs over one folder (the MCP server's watcher and extract_memory's own run, or two
    processes): the second read what was indexed before the first wrote the file's new content,
    so it takes the file as changed. Written again, its chunks would be deleted and inserted for
    nothing, and FTS5 would carry the deletions until its next merge (CI saw 72 KB land during a
    later, unrelated call). It finds the content written and leaves it."""
    folder = tmp_path / "notes"
    folder.mkdir()
    note = folder / "note.md"
    note.write_text("# Plans\n\nthe first version\n")
    db = str(tmp_path / "mem.db")
    first, second = HybridIndex(db, embedder=None), HybridIndex(db, embedder=None)
    first.index_folder(str(folder))
    note.write_text(
        "# Plans\n\n" + "".join(f"## h{i}\n\nthe second version {i}\n" for i in range(50))
    )

    def state():
        rows = first.conn.execute("select id, text from chunks order by id").fetchall()
        fts = first.conn.execute("select sum(length(block)) from chunks_fts_data").get
        return rows, fts

    class Overtaken(Progress):
        def start(self, total):  # after this run read what was indexed, before it reads files
            overtaking.append(first.index_folder(str(folder)).files_indexed)
            overtaking.append(state())

    overtaking: list = []
    report = second.index_folder(str(folder), progress=Overtaken())
    assert overtaking[0] == 1
    assert (report.files_indexed, report.files_unchanged) == (0, 1)
    assert state() == overtaking[1]
    assert "the second version 49" in state()[0][-1][1]
    check_fts(first.conn)
