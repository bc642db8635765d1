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
TAKE = (
    "take all-MiniLM-L6-v2-int8.hsmodel from hybridsql's release page or write it with"
    " `hybridsql model`"
)
MAKE_ONE = TAKE + ", or name another"
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
TEXT, LATER = sys.argv[4:6]

def sql(conn, text=TEXT):
    try:
        return conn.execute("select hex(embed(?))", (text,)).fetchone()[0]
    except apsw.Error as e:
        return str(e)

held = hybridsql.connect(":memory:")
local = LocalProvider(threads=1)
before = [sql(held), local.embed([TEXT])[0].tobytes().hex().upper()]
if change == "cut short":
    os.truncate(path, os.path.getsize(path) // 2)
elif change in ("rewritten in place", "its words rewritten in place"):  # as cp does: the same
    with open(other, "rb") as f, open(path, "r+b") as out:  # inode, its bytes written over
        out.write(f.read())
else:  # replaced, as `hybridsql model` writes it
    os.replace(other, path)
after = [sql(held), local.embed([TEXT])[0].tobytes().hex().upper()]
later = sql(held, LATER)  # a text whose word rows the process has not copied yet
new = sql(hybridsql.connect(":memory:"))
try:
    held.execute("select hybridsql_model(?)", (path,)).fetchall()
except apsw.Error as e:
    chosen = str(e)
else:
    chosen = sql(held)
print(json.dumps({"before": before, "after": after, "later": later, "new": new, "chosen": chosen}))
"""


LATER = "zymurgy"  # word rows in blocks that TEXT, [CLS] and [SEP] do not need


def first_unread(model_bytes) -> int:
    """The first of LATER's word rows (in the order embed() reads them) in a block of rows that
    TEXT's embedding did not copy: model.h's HS_WORD_BLOCK is 64 rows."""
    model = _native.Model(model_bytes)
    read = {i // 64 for i in model.tokens(TEXT) + [101, 102]}  # MiniLM's [CLS] and [SEP]
    return next(i for i in model.tokens(LATER) if i // 64 not in read)


def words_damaged(model_bytes) -> bytes:
    """The model with a byte flipped in that row, its checksums as they were: damage that only
    the word blocks' checksums can find."""
    words_at = int.from_bytes(model_bytes[40:48], "little")
    vocab = int.from_bytes(model_bytes[212:216], "little")
    row = (len(model_bytes) - words_at) // vocab
    data = bytearray(model_bytes)
    data[words_at + first_unread(model_bytes) * row] ^= 0x10
    return bytes(data)


CHANGES = ["cut short", "rewritten in place", "its words rewritten in place", "replaced"]


@pytest.mark.parametrize("change", CHANGES)
def test_a_model_file_that_changes_under_a_running_process(model_bytes, tmp_path, change):
    """Cut short, a mapped file killed the process (SIGBUS, exit 135); rewritten in place, the
    process's vectors silently became the new file's, in connections that held the model;
    replaced, a new connection kept the old one. Now a connection (and LocalProvider) that holds
    a model keeps its vectors to the bit, and a new lookup (a new connection,
    hybridsql_model('PATH') again) reads the file as it is now: its vectors, or its one line.
    The word rows are copied when a text first needs them, from the file the model keeps open:
    a later text gets the held model's vector where the rows are the same bytes (a file
    replaced keeps the open one; another model of the same words), else one line, never the
    vector of other rows."""
    path = tmp_path / "model.hsmodel"
    path.write_bytes(model_bytes)
    other = other_model(model_bytes)
    if change == "its words rewritten in place":
        other = words_damaged(model_bytes)
    other_path = tmp_path / "other.hsmodel"
    other_path.write_bytes(other)
    done = subprocess.run(
        [sys.executable, "-c", RUNNING, str(path), str(other_path), change, TEXT, LATER],
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
    held = _native.Model(model_bytes).embed(LATER).hex().upper()
    words = int.from_bytes(model_bytes[40:48], "little")
    vocab = int.from_bytes(model_bytes[212:216], "little")
    block = first_unread(model_bytes) // 64
    rows = f"its word rows {block * 64} to {block * 64 + 63}"
    if change in ("cut short", "its words rewritten in place"):
        row = (len(model_bytes) - words) // vocab
        cut = change == "cut short" and words + (block + 1) * 64 * row > len(model_bytes) // 2
        damage = "are past its end" if cut else "do not match their checksum"
        assert found["later"] == (
            f"embed(): the model file {path} changed or was damaged since it was read ({rows}"
            f" {damage}): restart the process once the file is whole; {TAKE}"
        )
    else:
        assert found["later"] == held
    if change == "cut short":
        size = len(model_bytes)
        line = f"the model file is truncated ({size // 2} of {size} bytes): {REMAKE}"
        assert found["new"] == f"embed(): $HYBRIDSQL_MODEL ({path}): {line}"
        assert found["chosen"] == f"hybridsql_model(): the model file {path}: {line}"
    elif change == "its words rewritten in place":
        line = f"the model file is damaged (its checksum does not match its bytes): {REMAKE}"
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
    """The file is read once per process: the first embed() adds the model (all but its word
    table, 11.4 of MiniLM's 23 MB, and the word rows its text needs); four connections in four
    threads, hybridsql_model() of the same file, and new lookups after the file was touched (read
    again, the same bytes) add no second copy."""
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
    head_mb = int.from_bytes(model_bytes[40:48], "little") / 2**20  # where the word table starts
    # a second copy would add the head again; under ASan the threads' own memory adds 6.6 MB
    assert first >= head_mb and rest < head_mb, out


WORDS_ORACLE = r"""
import json, random, sys, hybridsql
from hybridsql.db import _native

path = sys.argv[1]
def resident_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

rng = random.Random(7)
ranges = [(0x21, 0x7E), (0x4E00, 0x9FFF), (0x0600, 0x06FF), (0x0400, 0x04FF), (0x0E00, 0x0E7F),
          (0x0900, 0x097F), (0x3040, 0x30FF), (0xAC00, 0xD7A3), (0x0370, 0x03FF), (0x1F300, 0x1F6FF)]
def word():
    low, high = rng.choice(ranges)
    return "".join(chr(rng.randint(low, high)) for _ in range(rng.randint(1, 8)))
texts = ["", "How do I roll back a failed deploy?", "周五冻结部署，周一恢复。", "تجميد النشر يوم الجمعة",
         "Откат неудачного развёртывания", "การปรับใช้ล้มเหลว", " ".join(word() for _ in range(400))]
texts += [" ".join(word() for _ in range(rng.randint(1, 40))) for _ in range(40)]
conn = hybridsql.connect(":memory:")
before = resident_mb()
conn.execute("select hybridsql_model(?)", (path,)).fetchall()  # the model read and checked
conn.execute("select embed('x')").fetchall()
added = resident_mb() - before
whole = _native.Model(open(path, "rb").read())
differ = []
for i, text in enumerate(texts):
    for role in ("query", "document"):
        got = conn.execute("select embed(?, ?)", (text, role)).fetchone()[0]
        if got != whole.embed(text, role=role):
            differ.append((i, role))
print(json.dumps({"added": added, "differ": differ, "texts": len(texts)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "multilingual-e5-small"])
def test_word_rows_copied_as_texts_need_them_give_the_whole_files_vectors(name, tmp_path):
    """embed() copies a word block when a text first needs it (a new process's first query
    copies 19 of e5's 73 MB); every text, of every script, one of 400 words over several
    windows, as a query and as a document, gets the vector of the whole file read at once
    (_native.Model), to the bit."""
    from hybridsql.embedding import models

    path = models.ensure(models.named(name))
    data = path.read_bytes()
    assert data[16] == 2  # format 2, as `hybridsql model` writes both (format 1 is read whole)
    done = subprocess.run(
        [sys.executable, "-c", WORDS_ORACLE, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,  # not the checkout's root, whose hybridsql/ has no library when installed
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["texts"] == 47 and found["differ"] == []
    words_at = int.from_bytes(data[40:48], "little")
    # the whole file copied added all of it (MiniLM 23.1 MB, e5 73.4); now the head and a few
    # word blocks (11.4 and 19.4 MB), with room for a sanitizer's shadow of what it touched
    assert found["added"] < (words_at + (len(data) - words_at) / 2) / 2**20, found
