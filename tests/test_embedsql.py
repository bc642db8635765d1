"""embed() inside the extension (csrc/model/embedsql.c over csrc/model/model.c): the same vector in every
client that loads it, the model file it finds by itself, its one-line errors, interrupts, and a
hybrid search from a text in the stock sqlite3 shell and Perl's DBD::SQLite (issue 33)."""

import json
import os
import re
import shutil
import subprocess
import sys

import apsw
import numpy as np
import pytest
from conftest import HYBRIDSQL, SHELL
from onnx_reference import OnnxModel

import hybridsql
from hybridsql.db import _native
from hybridsql.embedding import engine
from hybridsql.embedding.local_model import LocalProvider

TEXT = "How do I roll back a failed deploy?"
PERL = shutil.which("perl")


def shell(*statements, db=":memory:", library=None, env=None):
    """The stock sqlite3 shell after .load: (stdout, stderr) of ``statements``."""
    proc = subprocess.run(
        [SHELL, db, f".load {library or hybridsql.loadable_path()}", *statements],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return proc.stdout.strip(), proc.stderr.strip()


def empty_cache(tmp_path) -> dict:
    """An environment in which the extension finds no model of its own."""
    (tmp_path / "empty-cache").mkdir(exist_ok=True)
    return {"HYBRIDSQL_CACHE_DIR": str(tmp_path / "empty-cache"), "HYBRIDSQL_MODEL": ""}


def test_embed_is_the_local_models_vector_in_every_client(model_file):
    """The shell's embed() is apsw's and the Python provider's (what an index stores) to the
    bit, and onnxruntime's to a cosine of 0.99999; NULL gives NULL, and another type the Python
    embed()'s error."""
    out, err = shell(f"select hex(embed('{TEXT}')), embed(NULL) is null")
    assert err == ""
    conn = hybridsql.connect(":memory:")
    (blob,) = conn.execute("select embed(?)", (TEXT,)).fetchone()
    assert out == f"{blob.hex().upper()}|1" and len(blob) == 384 * 4
    ours = np.frombuffer(blob, dtype="<f4")
    assert LocalProvider().embed([TEXT])[0].tobytes() == blob
    theirs = OnnxModel().embed([TEXT])[0]
    assert float(ours @ theirs) / np.linalg.norm(ours) / np.linalg.norm(theirs) >= 0.99999
    for literal, kind in (("x'00'", "blob"), ("42", "integer"), ("4.5", "real")):
        message = f"embed(): 1st argument must be text, got {kind}"
        with pytest.raises(apsw.SQLError, match="^" + re.escape(message) + "$"):
            conn.execute(f"select embed({literal})").fetchall()
        assert shell(f"select embed({literal})")[1] == f"Error: stepping, {message}"


def test_no_model_file_is_one_line_naming_what_to_do(tmp_path):
    env = empty_cache(tmp_path)
    library = os.path.dirname(hybridsql.loadable_path()) + os.sep
    out, err = shell("select embed('x')", env=env)
    # The bare library's step first (docs/platforms.md: the release's file beside the library),
    # then the Python package's (issue 39, item 10: it named only `hybridsql model` and
    # `pip install 'hybridsql[local]'`, which a user of the bare library has neither of).
    assert err == (
        "Error: stepping, embed(): no model file: put all-MiniLM-L6-v2-int8.hsmodel (from"
        f" hybridsql's release page) in the library's folder {library}, or write it with"
        f" `hybridsql model` to {env['HYBRIDSQL_CACHE_DIR']}{os.sep}, or name one with"
        " $HYBRIDSQL_MODEL or hybridsql_model('PATH')"
    )
    assert shell("select embed(NULL) is null", env=env) == ("1", "")


def damaged(model_file, tmp_path):
    """Files the engine must refuse, by name: (path, the engine's own line for its bytes or
    None where the extension says why before the engine reads them)."""
    data = model_file.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    files = {
        "empty": b"",
        "truncated": data[: len(data) // 3],
        "foreign": b"SQLite format 3\0" + bytes(4096),
        "flipped": bytes(flipped),
    }
    found = {}
    for name, content in files.items():
        path = tmp_path / f"{name}.hsmodel"
        path.write_bytes(content)
        line = None
        if content:
            with pytest.raises(hybridsql.EmbeddingError) as refused:
                _native.Model(content)
            line = str(refused.value)
        found[name] = (path, line)
    return found


@pytest.mark.parametrize("name", ["missing", "empty", "truncated", "foreign", "flipped"])
def test_a_bad_model_file_is_one_line_never_a_vector(model_file, tmp_path, name):
    files = damaged(model_file, tmp_path)
    path, line = files.get(name, (tmp_path / "missing.hsmodel", None))
    where = f"$HYBRIDSQL_MODEL ({path})"
    if name == "missing":
        why = f"{where} does not exist; take all-MiniLM-L6-v2-int8.hsmodel from hybridsql's"
    elif name == "empty":
        why = f"{where} is empty: it is not a model file; take all-MiniLM-L6-v2-int8.hsmodel"
    else:
        why = f"{where}: {line}"
    out, err = shell("select length(embed('x'))", env={"HYBRIDSQL_MODEL": str(path)})
    assert out == "" and err.startswith(f"Error: stepping, embed(): {why}") and "\n" not in err
    conn = hybridsql.connect(":memory:")
    chosen = "hybridsql_model(): " + why.replace(where, f"the model file {path}")
    with pytest.raises(apsw.SQLError, match="^" + re.escape(chosen)):
        conn.execute("select hybridsql_model(?)", (str(path),)).fetchall()


def test_an_empty_blob_is_refused_as_a_truncated_model(tmp_path):
    """SQLite hands an empty BLOB over as a NULL pointer: it is refused as a file of 0 bytes,
    by hybridsql_model() and from the table hybridsql_model alike. (The C once passed that NULL
    to memcmp and memcpy: undefined behaviour, which CI's sanitizer build halts on; found by
    fuzz/fuzz_model.c.)"""
    truncated = (
        "the model file is truncated (0 bytes, not even a header): make it again with"
        " `hybridsql model --out FILE`"
    )
    conn = hybridsql.connect(":memory:")
    message = f"hybridsql_model(): the model BLOB: {truncated}"
    with pytest.raises(apsw.SQLError, match="^" + re.escape(message) + "$"):
        conn.execute("select hybridsql_model(x'')").fetchall()
    db = str(tmp_path / "empty-model.db")
    env = empty_cache(tmp_path)
    shell(
        "create table hybridsql_model(model blob)",
        "insert into hybridsql_model values (x'')",
        db=db,
    )
    assert shell("select embed('x')", db=db, env=env) == (
        "",
        f"Error: stepping, embed(): the model in the table hybridsql_model: {truncated}",
    )


def test_hybridsql_model_names_the_file_or_its_bytes(model_file, tmp_path):
    """One SQL call names the model for the connection, by path or by its bytes; a view or a
    trigger cannot call it (it reads any file it is given)."""
    env = empty_cache(tmp_path)
    out, err = shell(
        f"select hybridsql_model('{model_file}')", "select length(embed('x'))", env=env
    )
    assert (out, err) == ("all-MiniLM-L6-v2-int8\n1536", "")
    out, err = shell(
        f"select hybridsql_model(readfile('{model_file}'))", "select length(embed('x'))", env=env
    )
    assert (out, err) == ("all-MiniLM-L6-v2-int8\n1536", "")
    _, err = shell(
        f"create view v as select hybridsql_model('{model_file}')", "select * from v", env=env
    )
    assert err == "Error: in prepare, unsafe use of hybridsql_model()"
    message = (
        "hybridsql_model(): 1st argument must be a model file's path (text) or its bytes (blob),"
        " got integer"
    )
    assert shell("select hybridsql_model(7)")[1] == f"Error: stepping, {message}"


def test_a_database_that_carries_its_model(model_file, tmp_path):
    """`hybridsql model --into` keeps the model inside the database: a client with no model file
    of its own embeds with it. A table holding no model's bytes is named in the error."""
    db = str(tmp_path / "self-contained.db")
    done = subprocess.run(
        [HYBRIDSQL, "model", "--into", db], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(model_file)
    env = empty_cache(tmp_path)
    conn = hybridsql.connect(":memory:")
    (want,) = conn.execute("select hex(embed(?))", (TEXT,)).fetchone()
    assert shell(f"select hex(embed('{TEXT}'))", db=db, env=env) == (want, "")
    other = str(tmp_path / "text.db")
    shell(
        "create table hybridsql_model(model blob)",
        "insert into hybridsql_model values ('x')",
        db=other,
    )
    assert shell("select embed('x')", db=other, env=env)[1] == (
        "Error: stepping, embed(): the table hybridsql_model holds text in its column model,"
        " not the model file's bytes; store them with `hybridsql model --into FILE`"
    )


def test_the_model_file_beside_the_library(model_file, tmp_path):
    """A bare library finds the model file put in its own folder: nothing to name."""
    folder = tmp_path / "lib"
    folder.mkdir()
    library = shutil.copy(hybridsql.loadable_path(), folder / _native.LIBRARY)
    shutil.copy(model_file, folder / engine.MODEL_FILE)
    out, err = shell("select length(embed('x'))", library=library, env=empty_cache(tmp_path))
    assert (out, err) == ("1536", "")


@pytest.mark.skipif(sys.platform == "win32", reason="the variables of a Unix cache folder")
@pytest.mark.parametrize("variables", ["HYBRIDSQL_CACHE_DIR", "XDG_CACHE_HOME", "HOME"])
def test_the_extension_looks_where_python_writes(model_file, tmp_path, monkeypatch, variables):
    """The cache folder the C side reads is extension.cache_dir()'s, under each variable."""
    for name in ("HYBRIDSQL_CACHE_DIR", "XDG_CACHE_HOME", "HYBRIDSQL_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variables, str(tmp_path / variables))
    if variables != "HOME":
        monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    where = engine.model_path()
    assert str(where).startswith(str(tmp_path / variables))
    where.parent.mkdir(parents=True)
    shutil.copy(model_file, where)
    assert shell("select length(embed('x'))") == ("1536", "")


def test_an_interrupt_stops_a_long_embed_between_windows(model_file):
    """sqlite3_interrupt during embed(): it stops at the next window with its own error, where
    SQLite alone could stop the statement only once the call returned."""
    conn = hybridsql.connect(":memory:")
    conn.create_scalar_function("interrupt_now", lambda: conn.interrupt() or 1, 0)
    long = "the deploy was rolled back " * 2000  # eight windows
    with pytest.raises(apsw.InterruptError, match="^interrupted$"):
        conn.execute("select interrupt_now(), embed(?)", (long,)).fetchall()
    assert conn.execute("select length(embed(?))", (long,)).fetchone() == (1536,)


# -- a hybrid search from a text, in clients that only load the library --------------------


@pytest.fixture(scope="module")
def explained(example_db, model_file):
    """(the CLI's top 10 ids, the statement --explain prints) for one hybrid query."""
    args = ["search", "rolling back a deploy", "--db", example_db, "--per-file", "0"]
    args += ["--now", "2026-11-22", "-n", "10"]
    env = {**os.environ, "HYBRIDSQL_EMBEDDER": "local"}
    run = [HYBRIDSQL, *args]
    found = json.loads(
        subprocess.run([*run, "--json"], capture_output=True, text=True, check=True, env=env).stdout
    )
    statement = subprocess.run(
        [*run, "--explain"], capture_output=True, text=True, check=True, env=env
    ).stdout
    ids = [r["id"] for r in found["results"]]
    assert found["mode"] == "hybrid" and len(ids) == 10
    return ids, statement


def test_explain_writes_the_query_vector_as_embed(explained):
    _, statement = explained
    assert "embed('rolling back a deploy')" in statement
    assert not re.search(r"x'[0-9a-f]{3072}'", statement)


def test_the_stock_shell_runs_the_hybrid_statement_from_a_text(explained, example_db):
    ids, statement = explained
    proc = subprocess.run(
        [SHELL, "-json", "-cmd", f".load {hybridsql.loadable_path()}", example_db],
        input=statement,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [row["id"] for row in json.loads(proc.stdout)] == ids


PERL_SCRIPT = r"""
use strict; use DBI;
my ($db, $library) = @ARGV;
my $dbh = DBI->connect("dbi:SQLite:dbname=$db", "", "", {RaiseError => 1, sqlite_unicode => 1});
$dbh->sqlite_enable_load_extension(1);
$dbh->sqlite_load_extension($library);
local $/; my $sql = <STDIN>;
$sql =~ s/^--.*\n//mg;
my $rows = $dbh->selectall_arrayref($sql, {Slice => {}});
print join(",", map { $_->{id} } @$rows), "\n";
"""


def test_perl_dbd_sqlite_runs_the_hybrid_statement_from_a_text(explained, example_db):
    """A driver of another language, from Debian's packages, with nothing of Python."""
    found = PERL and subprocess.run(
        [PERL, "-MDBD::SQLite", "-e", "1"], capture_output=True, check=False
    )
    if not found or found.returncode != 0:
        pytest.skip(
            "needs Debian's libdbd-sqlite3-perl (apt-get install libdbd-sqlite3-perl),"
            " which .ci/run installs"
        )
    ids, statement = explained
    proc = subprocess.run(
        [PERL, "-e", PERL_SCRIPT, example_db, hybridsql.loadable_path()],
        input=statement,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == ",".join(map(str, ids))


def test_a_search_writes_again_a_damaged_model_file_in_the_cache(example_db, model_file, tmp_path):
    """A model file in the cache folder that the extension refuses (another version's, a torn
    copy) is written again by the next search, which then embeds with it; where the cache
    folder cannot be written, the search embeds with the Python provider instead."""
    db = str(tmp_path / "mem.db")
    shutil.copy(example_db, db)
    cache = tmp_path / "cache"
    cache.mkdir()
    torn = cache / engine.MODEL_FILE
    torn.write_bytes(model_file.read_bytes()[:4096])
    args = ["search", "rolling back a deploy", "--db", db, "--json"]
    for env in ({"HYBRIDSQL_CACHE_DIR": str(cache)}, {"HYBRIDSQL_CACHE_DIR": "/proc/none"}):
        done = subprocess.run(
            [HYBRIDSQL, *args],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "HYBRIDSQL_MODEL": "", **env},
        )
        assert json.loads(done.stdout)["mode"] == "hybrid", done.stderr
    assert torn.read_bytes() == model_file.read_bytes()


PIN_CYCLES = 6
# Each cycle opens a connection, loads the library, embeds and closes the connection, which
# unloads the library (it was the only one that loaded it), then says the process's resident
# memory in MiB: apsw alone, nothing of hybridsql's Python, which would hold the library open.
APSW_CYCLES = """
import sys, apsw
for _ in range(int(sys.argv[2])):
    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sys.argv[1])
    assert len(conn.execute("select embed('hello')").fetchone()[0]) == 1536
    conn.close()
    with open("/proc/self/status") as f:
        print(next(int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS:")))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")
def test_a_library_unloaded_and_loaded_again_keeps_its_model_once(model_file):
    """The library pins itself at its first model (Requirement 14). SQLite unloads it when the
    last connection that loaded it closes, and its model, read into the process's own memory,
    stayed there out of reach: the next load read the file again, 23 MB more a cycle (37, 60,
    83, ... MiB in apsw; the same in the stock shell). Now the resident memory after the
    first cycle stays where it is, in apsw and in the stock shell (each `.open` closes the
    connection before it)."""
    env = {**os.environ, "HYBRIDSQL_MODEL": str(model_file)}
    library = hybridsql.loadable_path()
    done = subprocess.run(
        [sys.executable, "-c", APSW_CYCLES, library, str(PIN_CYCLES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    resident = [int(line) for line in done.stdout.split()]
    assert len(resident) == PIN_CYCLES
    model_mib = model_file.stat().st_size >> 20  # 22
    # Flat: less than half a model over five more cycles (it grew by a model each).
    assert resident[-1] - resident[0] < model_mib // 2, resident
    cycle = (
        f".open :memory:\n.load {library}\nselect length(embed('hello'));\n"
        ".system grep VmRSS /proc/$PPID/status\n"
    )
    shell = subprocess.run(
        [SHELL, ":memory:"],
        input=cycle * PIN_CYCLES,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    resident = [int(kb) >> 10 for kb in re.findall(r"VmRSS:\s+(\d+) kB", shell.stdout)]
    assert shell.stdout.count("1536\n") == PIN_CYCLES and len(resident) == PIN_CYCLES
    assert resident[-1] - resident[0] < model_mib // 2, resident
