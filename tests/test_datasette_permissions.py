"""The search page inside Datasette answers 403 wherever Datasette's own pages would: a
database or a table behind an ``allow`` block is not readable through it."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import EXAMPLES
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
def datasette(path, metadata, tmp_path):
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "datasette.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [
                DATASETTE,
                "serve",
                path,
                "-m",
                str(tmp_path / "metadata.json"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "--secret",
                SECRET,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, HYBRIDSQL_EMBEDDER="none"),
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
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
    finally:
        server.terminate()
        server.wait(timeout=60)


def fetch(url, cookie=None):
    """(status, body) of a GET, as the given actor (anonymous without a cookie)."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def search(base, **args):
    return f"{base}/mem/-/hybridsql?{urllib.parse.urlencode(dict(args, mode='keyword'))}"


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
