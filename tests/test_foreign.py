"""Files that are not ours to change. Another application's SQLite database named where an index
goes: every command that writes refuses it in one line and leaves it byte for byte as it was,
in its own journal mode (no -wal file appears). An index this user cannot write (its folder, or
the file itself): every search command reads it all the same, and changes nothing.

Permission bits do not stop root, so the commands that must not write run as ``nobody`` when
the tests run as root (``setpriv``), and as the tests' own user otherwise."""

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from contextlib import closing

import apsw
import pytest
from conftest import EXAMPLES, HYBRIDSQL, run_hybridsql

from hybridsql.errors import DatabaseError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import READ_ONLY_NOTE

FOREIGN = {
    "users": "create table users(id integer primary key, name text);"
    " insert into users values (1, 'Ada')",
    # a table called chunks, of another shape than ours
    "chunks": "create table chunks(id integer primary key, body text, score real);"
    " insert into chunks values (1, 'x', 0.5)",
    # only an index and a view: no table, yet not an empty file
    "view": "create view answers as select 42 as answer",
    # no table at all, but claimed: another application's file format, not yet filled
    "claimed": "pragma application_id = 1234; pragma user_version = 9",
    "versioned": "pragma user_version = 9",
}

EXTRACT = ["--topic", "t", "--title", "T", "--content", "c", "--memory-dir", "{memory_dir}"]
WRITES = {
    "index": ["index", EXAMPLES, "--embedder", "none"],
    "memory add": ["memory", "add", "a memory", "--embedder", "none"],
    "memory extract": ["memory", "extract", *EXTRACT, "--embedder", "none"],
    "memory session start": ["memory", "session", "start", "--embedder", "none"],
    "mcp (stdio)": ["mcp", "--embedder", "none"],
}


def state(path):
    """The file's sha256, and which of its -wal, -shm and -journal files exist."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return digest, [s for s in ("-wal", "-shm", "-journal") if os.path.exists(path + s)]


@pytest.fixture(params=sorted(FOREIGN))
def foreign(request, tmp_path):
    path = str(tmp_path / f"{request.param}.db")
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(FOREIGN[request.param])
    return path


@pytest.mark.parametrize("command", sorted(WRITES))
def test_a_writing_command_refuses_another_applications_file_and_leaves_it_as_it_was(
    command, foreign, tmp_path
):
    memory_dir = tmp_path / "notes"
    memory_dir.mkdir()
    argv = [a.format(memory_dir=memory_dir) for a in WRITES[command]]
    before = state(foreign)
    assert before[1] == []
    out = subprocess.run(
        [HYBRIDSQL, *argv, "--db", foreign],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (out.returncode, out.stdout, out.stderr) == (
        1,
        "",
        f"hybridsql: {foreign} is not a hybridsql index; use another file\n",
    )
    assert state(foreign) == before
    assert os.listdir(memory_dir) == []  # extract writes no note for an index it cannot use


def test_hybrid_index_refuses_another_applications_file_and_leaves_it_as_it_was(foreign):
    before = state(foreign)
    with pytest.raises(DatabaseError) as raised:
        HybridIndex(foreign, embedder=None)
    assert str(raised.value) == f"{foreign} is not a hybridsql index; use another file"
    assert state(foreign) == before


@pytest.mark.parametrize("content", [None, b""], ids=["new file", "empty file"])
def test_a_new_or_empty_file_becomes_an_index(tmp_path, content):
    path = tmp_path / "mem.db"
    if content is not None:
        path.write_bytes(content)
    added = run_hybridsql("memory", "add", "a memory", "--db", str(path), "--embedder", "none")
    assert added.returncode == 0, added.stderr
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("select text from chunks").fetchall() == [("a memory",)]


# -- an index this user cannot write ---------------------------------------------------------


def as_reader(argv):
    """``argv`` as a user who can read the test's files and write none of them: ``nobody``
    when the tests run as root, else the tests' own user (the files are made read-only)."""
    if os.geteuid() == 0:
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv]
    return argv


@pytest.fixture(scope="module")
def source_index(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("source") / "index.db")
    indexed = run_hybridsql("index", EXAMPLES, "--db", path, "--embedder", "none")
    assert indexed.returncode == 0, indexed.stderr
    added = run_hybridsql("memory", "add", "Deploys freeze in December", "--db", path)
    assert added.returncode == 0, added.stderr
    return path


@pytest.fixture(params=["folder", "file"])
def unwritable(request, source_index):
    """A copy of the index (WAL mode, no -wal or -shm file) that this user cannot write: in a
    folder it cannot write, or itself read-only in a folder it can write. Not under pytest's
    tmp_path, which only root may enter."""
    folder = tempfile.mkdtemp(prefix="hybridsql-unwritable-")
    path = os.path.join(folder, "index.db")
    shutil.copy(source_index, path)
    os.chmod(path, 0o444)
    os.chmod(folder, 0o555 if request.param == "folder" else 0o777)
    if os.geteuid() != 0 and request.param == "file":
        os.chmod(folder, 0o755)  # its owner writes it; the file stays read-only
    try:
        yield path
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


SEARCHES = {
    "search": ["search", "deploy"],
    "memory search": ["memory", "search", "deploy"],
    "memory search --no-reinforce": ["memory", "search", "deploy", "--no-reinforce"],
    "memory documents": ["memory", "documents", "deploy"],
}


@pytest.mark.parametrize("command", sorted(SEARCHES))
def test_an_index_this_user_cannot_write_is_searched(command, unwritable):
    before = state(unwritable)
    argv = [HYBRIDSQL, *SEARCHES[command], "--db", unwritable, "--embedder", "none", "--json"]
    out = subprocess.run(as_reader(argv), capture_output=True, text=True, timeout=300, check=False)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    found = json.loads(out.stdout)
    assert found["results"], found
    if command == "memory search":  # it would reinforce: it says why it did not
        assert READ_ONLY_NOTE in found["notes"]
    else:
        assert READ_ONLY_NOTE not in found.get("notes", [])
    assert state(unwritable)[0] == before[0]  # a reader may leave its -shm beside the file


def test_an_unwritable_index_with_transactions_left_in_its_wal_says_why_it_cannot_be_read(
    source_index, tmp_path
):
    """Reading a -wal file needs a -shm file beside it, which this user cannot make: one line
    says so, and nothing changes."""
    written = str(tmp_path / "written.db")
    shutil.copy(source_index, written)
    folder = tempfile.mkdtemp(prefix="hybridsql-unwritable-")
    path = os.path.join(folder, "index.db")
    writer = apsw.Connection(written)
    try:  # a copy taken while the writer is open: the -wal file still holds its transaction
        writer.execute("pragma wal_autocheckpoint = 0")
        writer.execute("insert into meta values ('left in the wal', 1)")
        shutil.copy(written, path)
        shutil.copy(written + "-wal", path + "-wal")
    finally:
        writer.close()
    os.chmod(folder, 0o555)
    try:
        before = state(path)
        assert before[1] == ["-wal"]
        argv = [HYBRIDSQL, "search", "deploy", "--db", path, "--embedder", "none"]
        out = subprocess.run(
            as_reader(argv), capture_output=True, text=True, timeout=300, check=False
        )
        assert (out.returncode, out.stdout, out.stderr) == (
            1,
            "",
            f"hybridsql: cannot read {path}: its -wal file holds transactions, which SQLite reads"
            f" through a -shm file that this user cannot make in {folder}; copy both files"
            " somewhere writable, or open it once as a user who can write there\n",
        )
        assert state(path) == before
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)
