"""The search page inside Datasette answers 403 wherever Datasette's own pages would: a
database or a table behind an ``allow`` block is not readable through it."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import DEADLINE, EXAMPLES, spawned
from itsdangerous import URLSafeSerializer

from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

DATASETTE = os.path.join(os.path.dirname(sys.executable), "datasette")
SECRET = "test-secret-of-this-datasette"
ROOT_COOKIE = "ds_actor=" + URLSafeSerializer(SECRET, "actor").dumps({"a": {"id": "root"}})
MEMORY = "Deploys are frozen until the audit ends"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("perm") / "mem.db")
    with HybridIndex(path, embedder="none") as idx:
        idx.index_folder(EXAMPLES)
        MemoryStore(idx).add(MEMORY, "tide", "episodic")
    return path


@contextlib.contextmanager
def datasette(path, metadata, tmp_path, plugins=None, embedder="none"):
    """`datasette serve` of ``path`` with ``metadata`` (and the plugins of the folder
    ``plugins``), on a free port: its base URL. Stopped, with all it started, at the end."""
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "datasette.log"
    argv = [DATASETTE, "serve", path, "-m", str(tmp_path / "metadata.json")]
    argv += ["-h", "127.0.0.1", "-p", str(port), "--secret", SECRET]
    argv += ["--plugins-dir", str(plugins)] if plugins else []
    with (
        open(log, "w") as out,
        spawned(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, HYBRIDSQL_EMBEDDER=embedder),
        ) as server,
    ):
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + DEADLINE
        while True:
            assert server.poll() is None, log.read_text()
            try:
                urllib.request.urlopen(base + "/-/versions.json", timeout=5)
                break
            except urllib.error.HTTPError:  # it answers (403 behind an instance's allow)
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield base


def fetch(url, cookie=None):
    """(status, body) of a GET, as the given actor (anonymous without a cookie)."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def search(base, **args):
    args.setdefault("mode", "keyword")
    return f"{base}/mem/-/hybridsql?{urllib.parse.urlencode(args)}"


def test_a_database_behind_allow_is_403_through_the_page(index, tmp_path):
    metadata = {"databases": {"mem": {"allow": {"id": "root"}}}}
    with datasette(index, metadata, tmp_path) as base:
        for url in (
            base + "/mem",
            base + "/mem.json?sql=select+1",
            search(base, q="deploy"),
            search(base, q="deploy", kind="memories"),
            base + "/mem/-/hybridsql",  # the empty form too: it names the database's tables
        ):
            status, body = fetch(url)
            assert status == 403, url
            assert "audit" not in body and "MEMORY.md" not in body
        status, body = fetch(search(base, q="audit", kind="memories"), ROOT_COOKIE)
        assert status == 200 and "frozen until the" in body


def test_a_table_behind_allow_is_403_through_the_page_where_it_is_read(index, tmp_path):
    metadata = {"databases": {"mem": {"tables": {"memories": {"allow": {"id": "root"}}}}}}
    with datasette(index, metadata, tmp_path) as base:
        assert fetch(base + "/mem/memories")[0] == 403  # Datasette's own page
        status, body = fetch(search(base, q="audit", kind="memories"))
        assert status == 403 and "audit" not in body
        # a documents search reads no memories table: Datasette would show those tables
        status, body = fetch(search(base, q="deploy"))
        assert status == 200 and "MEMORY.md" in body
        status, body = fetch(search(base, q="audit", kind="memories"), ROOT_COOKIE)
        assert status == 200 and "frozen until the" in body


def test_an_instance_behind_allow_is_403_through_the_page(index, tmp_path):
    with datasette(index, {"allow": {"id": "root"}}, tmp_path) as base:
        assert fetch(base + "/")[0] == 403
        assert fetch(search(base, q="deploy"))[0] == 403
        assert fetch(search(base, q="deploy"), ROOT_COOKIE)[0] == 200


# A deployment's rules that allow a user the tables of their own and nothing else: no table of
# SQLite's (sqlite_master...) and no shadow table (chunks_fts_idx, vectors_blocks), which
# Datasette lists among a database's tables but no one looks at.
OWN_TABLES_ONLY = """
from datasette import hookimpl


@hookimpl
def permission_allowed(datasette, actor, action, resource):
    if action != "view-table":
        return None

    async def inner():
        database, table = resource
        listed = await datasette.get_database(database).execute("pragma main.table_list")
        shadow = {row[1] for row in listed.rows if row[2] == "shadow"}
        return False if table.startswith("sqlite_") or table in shadow else None

    return inner
"""


def test_the_page_searches_under_rules_that_allow_the_users_own_tables_alone(
    tmp_path, example_db, model_file
):
    """Issue 39, found on the way: a hybrid search on the local model reads sqlite_master (the
    safe lookup of a database's model, in embed()), and the page asked view-table of every
    table the search read, shadow tables too: under rules that allow the user's own tables and
    no others it answered 403 where Datasette's own pages answer. Now SQLite's tables need the
    database's permission alone and a shadow table its virtual table's, as on Datasette's own
    pages; a table the rules deny (memories, behind an allow block) is still 403."""
    path = str(tmp_path / "mem.db")
    shutil.copyfile(example_db, path)
    with HybridIndex(path, embedder="local") as idx:
        MemoryStore(idx).add(MEMORY, "tide", "episodic")
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "own_tables.py").write_text(OWN_TABLES_ONLY)
    metadata = {"databases": {"mem": {"tables": {"memories": {"allow": {"id": "root"}}}}}}
    with datasette(path, metadata, tmp_path, plugins=plugins, embedder="local") as base:
        assert fetch(base + "/mem/chunks")[0] == 200
        assert fetch(base + "/mem/chunks_fts_idx")[0] == 403  # the rules hold on Datasette's
        assert fetch(base + "/mem/vectors_blocks")[0] == 403
        status, body = fetch(search(base, q="rolling back a bad deploy", mode="hybrid"))
        assert status == 200 and "deploy-runbook.md" in body, body[-2000:]
        assert "vector 0." in body  # the query was embedded: a hybrid search, not keywords
        status, body = fetch(search(base, q="audit", kind="memories", mode="hybrid"))
        assert status == 403 and "frozen until the" not in body
        status, body = fetch(search(base, q="audit", kind="memories", mode="hybrid"), ROOT_COOKIE)
        assert status == 200 and "frozen until the" in body
