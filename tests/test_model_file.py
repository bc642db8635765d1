"""The model file as the extension's embed() (csrc/model/embedsql.c) and LocalProvider
(local_model.py) read it (issue 39, items 5 to 7): whatever the path names (a FIFO, a device, a
folder, a loop of links), and however the file changes under a running process (cut short,
rewritten in place as `cp` does, replaced), no hang, no crash and no vector changed without an
error: a connection that holds a model keeps its vectors, and a new lookup reads the file as it
is now."""

import json
import os
import struct
import subprocess
import sys

import apsw
import pytest
from conftest import SHELL

import hybridsql
from hybridsql.db import _native
from hybridsql.embedding import engine, model_file
from hybridsql.embedding.engine import read_model
from hybridsql.errors import EmbeddingError

TEXT = "How do I roll back a failed deploy?"
MAKE_ONE = (
    "take all-MiniLM-L6-v2-int8.hsmodel from hybridsql's release page or write it with"
    " `hybridsql model`, or name another"
)
REMAKE = "make it again with `hybridsql model --out FILE`"
unix = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, devices and links of Unix")


@pytest.fixture(scope="module")
def model_bytes():
    path = engine.model_path()
    if not path.is_file():
        engine.write_model()
    return path.read_bytes()


def other_model(model_bytes) -> bytes:
    """Another model of the same size: the LayerNorm epsilon changed, the checksum made right,
    as a model file of another release would be."""
    data = bytearray(model_bytes)
    data[228:232] = struct.pack("<f", 0.5)
    return model_file.seal(data)


def shell(*statements, env=None):
    """The stock sqlite3 shell after .load: (stdout, stderr). A timeout rather than a hang."""
    proc = subprocess.run(
        [SHELL, ":memory:", f".load {hybridsql.loadable_path()}", *statements],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HYBRIDSQL_MODEL": "", **(env or {})},
    )
    return proc.stdout.strip(), proc.stderr.strip()


def local_provider(env: dict) -> subprocess.CompletedProcess:
    """LocalProvider's first embedding in a new process under ``env``, a timeout rather than a
    hang; its last line is the error's."""
    script = (
        "from hybridsql.embedding.local_model import LocalProvider\n"
        "try:\n"
        "    LocalProvider(threads=1).embed(['x'])\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "HYBRIDSQL_MODEL": "", **env},
    )


# --- what is not a file -----------------------------------------------------------------------


def not_a_file(tmp_path, kind: str) -> tuple:
    """(a path of ``kind``, the words embed() says of it)."""
    if kind == "FIFO":
        path = tmp_path / "model.fifo"
        os.mkfifo(path)
        return path, "is not a file (a FIFO)"
    if kind == "folder":
        return tmp_path, "is not a file (a folder)"
    if kind == "device":
        return "/dev/zero", "is not a file (a device)"
    path = tmp_path / "loop"
    os.symlink(path, path)
    return path, "is a loop of symbolic links"


@unix
@pytest.mark.parametrize("kind", ["FIFO", "folder", "device", "loop"])
def test_what_is_not_a_model_file_is_one_line_and_never_blocks(tmp_path, kind):
    """A FIFO blocked open() for ever (no writer comes), in the shell and in LocalProvider; a
    loop of links was "check its permissions". Refused before a byte is read, each way in."""
    path, why = not_a_file(tmp_path, kind)
    assert shell("select embed('x')", env={"HYBRIDSQL_MODEL": str(path)}) == (
        "",
        f"Error: stepping, embed(): $HYBRIDSQL_MODEL ({path}) {why}; {MAKE_ONE}",
    )
    assert shell(f"select hybridsql_model('{path}')") == (
        "",
        f"Error: stepping, hybridsql_model(): the model file {path} {why}; {MAKE_ONE}",
    )
    done = local_provider({"HYBRIDSQL_MODEL": str(path)})
    said = {"loop": "it is a loop of symbolic links"}.get(kind, f"it {why}")
    assert done.stdout.strip() == f"EmbeddingError the model file {path}: {said}", done.stderr


@unix
def test_a_fifo_in_the_cache_folder_is_refused_too(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    fifo = cache / engine.MODEL_FILE
    os.mkfifo(fifo)
    assert shell("select embed('x')", env={"HYBRIDSQL_CACHE_DIR": str(cache)}) == (
        "",
        f"Error: stepping, embed(): the model file {fifo} is not a file (a FIFO); {MAKE_ONE}",
    )
    with pytest.raises(EmbeddingError, match="is not a file \\(a FIFO\\)$"):
        read_model(fifo)


def test_a_cache_folder_of_any_length_is_looked_in(model_bytes, tmp_path):
    """A $HYBRIDSQL_CACHE_DIR over 1,024 bytes was passed over without a word."""
    cache = tmp_path
    while len(str(cache)) <= 1100:
        cache = cache / ("d" * 200)
    cache.mkdir(parents=True)
    (cache / engine.MODEL_FILE).write_bytes(model_bytes)
    assert shell("select length(embed('x'))", env={"HYBRIDSQL_CACHE_DIR": str(cache)}) == (
        "1536",
        "",
    )


def test_a_header_that_asks_for_too_much_is_refused_before_the_rest_is_read(tmp_path):
    """A sparse file of 2 GB whose header says so: refused by its header's line, not read
    (the whole file was read and checksummed before)."""
    path = tmp_path / "huge.hsmodel"
    header = bytearray(128)
    header[:16] = model_file.MAGIC
    header[16:32] = struct.pack("<IIQ", 1, 128, 2 << 30)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(2 << 30)
    line = (
        f"the model file's header gives it {2 << 30} bytes, over the 1024 MiB a model file may"
        f" have: {REMAKE}"
    )
    assert shell("select embed('x')", env={"HYBRIDSQL_MODEL": str(path)}) == (
        "",
        f"Error: stepping, embed(): $HYBRIDSQL_MODEL ({path}): {line}",
    )
    with pytest.raises(EmbeddingError, match=f"^the model file {path}: the model file's header"):
        read_model(path)


def test_a_model_id_that_is_not_utf8_is_refused_in_sql(model_bytes):
    """hybridsql_model() returned the id as TEXT that was not UTF-8."""
    data = model_file.seal(model_bytes[:128] + b"caf\xe9".ljust(64, b"\0") + model_bytes[192:])
    conn = hybridsql.connect(":memory:")
    line = f"the model file's id is not UTF-8 text of 1 to 63 bytes ending in NUL: {REMAKE}"
    with pytest.raises(apsw.SQLError) as refused:
        conn.execute("select hybridsql_model(?)", (bytes(data),)).fetchall()
    assert str(refused.value) == f"hybridsql_model(): the model BLOB: {line}"


# --- a file that changes under a running process ----------------------------------------------

RUNNING = r"""
import json, os, sys, apsw, hybridsql
from hybridsql.embedding.local_model import LocalProvider
path, other, change = sys.argv[1:4]
TEXT = sys.argv[4]

def sql(conn):
    try:
        return conn.execute("select hex(embed(?))", (TEXT,)).fetchone()[0]
    except apsw.Error as e:
        return str(e)

held = hybridsql.connect(":memory:")
local = LocalProvider(threads=1)
before = [sql(held), local.embed([TEXT])[0].tobytes().hex().upper()]
if change == "cut short":
    os.truncate(path, os.path.getsize(path) // 2)
elif change == "rewritten in place":  # as cp does: the same inode, its bytes written over
    with open(other, "rb") as f, open(path, "r+b") as out:
        out.write(f.read())
else:  # replaced, as `hybridsql model` writes it
    os.replace(other, path)
after = [sql(held), local.embed([TEXT])[0].tobytes().hex().upper()]
new = sql(hybridsql.connect(":memory:"))
try:
    held.execute("select hybridsql_model(?)", (path,)).fetchall()
except apsw.Error as e:
    chosen = str(e)
else:
    chosen = sql(held)
print(json.dumps({"before": before, "after": after, "new": new, "chosen": chosen}))
"""


@pytest.mark.parametrize("change", ["cut short", "rewritten in place", "replaced"])
def test_a_model_file_that_changes_under_a_running_process(model_bytes, tmp_path, change):
    """Cut short, a mapped file killed the process (SIGBUS, exit 135); rewritten in place, the
    process's vectors silently became the new file's, in connections that held the model;
    replaced, a new connection kept the old one. Now a connection (and LocalProvider) that holds
    a model keeps its vectors to the bit, and a new lookup (a new connection,
    hybridsql_model('PATH') again) reads the file as it is now: its vectors, or its one line."""
    path = tmp_path / "model.hsmodel"
    path.write_bytes(model_bytes)
    other = other_model(model_bytes)
    (tmp_path / "other.hsmodel").write_bytes(other)
    done = subprocess.run(
        [sys.executable, "-c", RUNNING, str(path), str(tmp_path / "other.hsmodel"), change, TEXT],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HYBRIDSQL_MODEL": str(path)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["before"][0] == found["before"][1] and len(found["before"][0]) == 384 * 8
    assert found["after"] == found["before"]
    if change == "cut short":
        size = len(model_bytes)
        line = f"the model file is truncated ({size // 2} of {size} bytes): {REMAKE}"
        assert found["new"] == f"embed(): $HYBRIDSQL_MODEL ({path}): {line}"
        assert found["chosen"] == f"hybridsql_model(): the model file {path}: {line}"
    else:
        theirs = _native.Model(other).embed(TEXT).hex().upper()
        assert theirs != found["before"][0]
        assert found["new"] == found["chosen"] == theirs


SHARED = r"""
import os, sys, threading, hybridsql
path = sys.argv[1]

def resident_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

conns = [hybridsql.connect(":memory:") for _ in range(4)]
before = resident_mb()
conns[0].execute("select embed('one')").fetchall()
first = resident_mb()
threads = [
    threading.Thread(target=lambda c: c.execute("select embed('two')").fetchall(), args=(c,))
    for c in conns
]
for t in threads:
    t.start()
for t in threads:
    t.join()
conns[1].execute("select hybridsql_model(?)", (path,)).fetchall()
os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # touched: another identity, the same bytes
conns[2].execute("select hybridsql_model(?)", (path,)).fetchall()
hybridsql.connect(":memory:").execute("select embed('three')").fetchall()
print(first - before, resident_mb() - first)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_connections_and_threads_share_one_copy(model_bytes, tmp_path):
    """The file is read once per process: the first embed() adds the model (23 MB); four
    connections in four threads, hybridsql_model() of the same file, and new lookups after the
    file was touched (read again, the same bytes) add no second copy."""
    path = tmp_path / "model.hsmodel"
    path.write_bytes(model_bytes)
    out = subprocess.run(
        [sys.executable, "-c", SHARED, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HYBRIDSQL_MODEL": str(path)},
        cwd=tmp_path,
    ).stdout.split()
    first, rest = map(float, out)
    assert first >= 20 and rest < 10, out
