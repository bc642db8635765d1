"""Indexing a memory folder: chunks, incremental updates, deletes, interruptions, output."""

import json
import os
import shutil
import subprocess

import pytest
from conftest import HYBRIDSQL

from hybridsql.embed import Embedder, LocalProvider
from hybridsql.index import HybridIndex, discover


class Counting:
    """Passes through to the real local model and records every text it is asked to embed."""

    def __init__(self, inner=None, fail_after=None):
        self.inner = inner or LocalProvider()
        self.model_id, self.dims = self.inner.model_id, self.inner.dims
        self.texts = []
        self.fail_after = fail_after

    def embed(self, texts):
        if self.fail_after is not None and len(self.texts) + len(texts) > self.fail_after:
            raise RuntimeError("the provider went away")
        self.texts.extend(texts)
        return self.inner.embed(texts)


def fresh_index(tmp_path, example_db, provider=None):
    db = str(tmp_path / "mem.db")
    shutil.copy(example_db, db)
    idx = HybridIndex(db, embedder="none")
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
    conn.execute("insert into chunks_fts(chunks_fts, rank) values ('integrity-check', 1)")
    conn.execute("insert into chunks_trigram(chunks_trigram, rank) values ('integrity-check', 1)")
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
    assert report.warnings == [["latin1.md", "invalid UTF-8 at byte 3, replaced with U+FFFD"]]
    assert [r.path for r in idx.search("espresso", mode="keyword")] == ["latin1.md"]


def test_keyword_only_without_a_provider(tmp_path, memory_dir):
    with HybridIndex(str(tmp_path / "k.db"), embedder="none") as idx:
        report = idx.index_folder(str(memory_dir))
        assert report.chunks_embedded == 0
        found = idx.search("ERR_CONN_RESET")
        assert found.mode == "keyword"
        assert found.notes == ["no embedding provider is configured: keyword-only search"]
        assert "memory/2026-08-19.md" in [r.path for r in found]


def run_cli(*args, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [HYBRIDSQL, *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_cli_index_is_quiet_json_when_piped(tmp_path, memory_dir):
    db = str(tmp_path / "cli.db")
    out = run_cli("index", str(memory_dir), "--db", db, "--embedder", "none")
    assert out.returncode == 0 and out.stderr == ""
    report = json.loads(out.stdout)
    assert report["files_indexed"] == report["files_seen"] > 20


def test_terminal_snippets_are_bold_and_cut_cleanly():
    from hybridsql.cli import terminal_snippet

    assert terminal_snippet("a <mark>Python</mark>\nrule") == "a \x1b[1mPython\x1b[0m rule"
    cut = terminal_snippet("x" * 8 + "<mark>code</mark> tail", width=10)
    assert cut == "x" * 8 + "\x1b[1mco\x1b[0m"


def test_cli_errors_are_messages_not_tracebacks(tmp_path):
    out = run_cli("index", str(tmp_path / "missing"), "--db", str(tmp_path / "x.db"))
    assert out.returncode == 1
    assert out.stderr == f"hybridsql: {tmp_path / 'missing'} is not a folder\n"
    out = run_cli("search", "x", "--db", str(tmp_path / "x.db"), "--pool", "0")
    assert out.returncode == 1
    assert out.stderr == "hybridsql: candidate_pool must be from 1 to 10000, not 0\n"
