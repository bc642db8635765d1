"""The Datasette plugin, on a real `datasette serve` over HTTP and in headless Chromium: the
search page, and Datasette's own pages, search box, facets and JSON API on an index."""

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import (
    DEADLINE,
    PYTHON_ONLY_LINE,
    STDLIB_LOADS_EXTENSIONS,
    WITHOUT_PYSQLITE3,
    spawned,
)
from datasette.utils import tilde_encode

import hybridsql
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

DATASETTE = os.path.join(os.path.dirname(sys.executable), "datasette")
CHROMIUM = shutil.which("chromium")
NOW = 1795219200.0  # 2026-11-19, the examples' calendar
QUERY = "how should python code be indented?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def datasette_serve(*paths, log: str, args=()):
    """`datasette serve PATHS ARGS` on a free port; yields its base URL once it answers."""
    port, base = free_port(), None
    with (
        open(log, "w") as out,
        spawned(
            [DATASETTE, "serve", *paths, "-h", "127.0.0.1", "-p", str(port), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        ) as server,
    ):
        deadline = time.monotonic() + DEADLINE  # until it answers, or it has exited
        while server.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/versions.json", timeout=60)
                base = f"http://127.0.0.1:{port}"
                break
            except OSError:
                time.sleep(0.05)  # a poll interval
        if base is None:
            with open(log) as f:
                pytest.fail(f"datasette did not answer: {f.read()}")
        try:
            yield base
        finally:
            server.terminate()  # as a user stops it (what it leaves behind is tested)
            server.wait(timeout=DEADLINE)


@pytest.fixture(scope="module")
def served(example_db, tmp_path_factory):
    """(base URL, path) of `datasette serve` on a copy of the example index with three memories,
    one of them superseded."""
    path = str(tmp_path_factory.mktemp("datasette") / "mem.db")
    shutil.copy(example_db, path)
    with HybridIndex(path, embedder="local") as idx:
        store = MemoryStore(idx, clock=lambda: NOW)
        old = store.add("Deploys are frozen from 2026-11-26 to 12-01", "tide", "episodic")
        store.supersede(old.id, "Deploys are frozen from 2026-11-27 to 12-02")
        store.add("Billing deploys on Tuesdays only", "billing", "procedural")
    with datasette_serve(path, log=path + ".log") as base:
        # The model loads on the first embed() of the process, inside that query's time limit:
        # the search page, which has none, loads it first, however busy the machine.
        get(page(base, q="warm"))
        yield base, path


def get(url: str) -> str:
    with urllib.request.urlopen(url) as response:
        return response.read().decode()


def page(base: str, **args) -> str:
    return f"{base}/mem/-/hybridsql?{urllib.parse.urlencode(args)}"


def chromium(*args) -> str:
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium), which .ci/run installs")
    out = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", *args],
        # Not CI's sanitizer runtime: chromium is not ours, and hangs with ASan preloaded.
        env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def results(html: str) -> list:
    """(path link, its href, snippet HTML) of each result of a rendered page."""
    return re.findall(
        r'<a href="([^"]+)" class="hs-path">([^<]+)</a>.*?<p class="hs-snippet">(.*?)</p>',
        html,
        re.S,
    )


def test_the_search_page_in_a_browser_puts_memory_md_first_with_marked_words(served, tmp_path):
    base, _ = served
    url = page(base, q=QUERY, now="2026-11-22")
    dom = chromium("--dump-dom", url)
    found = results(dom)
    assert len(found) >= 3
    href, where, snippet = found[0]
    assert where.startswith("MEMORY.md:") and href.startswith("/mem/chunks/")
    assert "<mark>Python</mark>" in snippet and "4 spaces" in snippet
    score = r"score 0\.\d{3}:\s+vector 0\.\d{3},\s+keyword 1\.000,\s+decay 1\.000; matched both"
    assert re.search(score, dom.split('class="hs-snippet"')[1])  # the first result's parts
    # the statement --explain prints, the query's words written in
    statement = re.search(r'<pre class="hs-sql">(.*?)</pre>', dom, re.S).group(1)
    assert statement.startswith("with") and "indented" in statement and ":" not in statement
    shot = tmp_path / "search.png"
    chromium("--hide-scrollbars", "--window-size=1100,900", f"--screenshot={shot}", url)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_result_links_to_its_row_page(served):
    base, _ = served
    href, where, _ = results(get(page(base, q=QUERY, now="2026-11-22")))[0]
    row = json.loads(get(f"{base}{href}.json?_shape=objects"))["rows"][0]
    assert where == f"{row['path']}:{row['start_line']}-{row['end_line']}"


def test_memories_are_searched_filtered_and_never_reinforced(served):
    base, path = served

    def state():
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        sql = "select group_concat(salience) || ':' || (select count(*) from session_memories) from memories"
        return digest, get(f"{base}/mem.json?sql={urllib.parse.quote(sql)}&_shape=array")

    before = state()
    html = get(page(base, q="deploys frozen", kind="memories", project="tide"))
    assert [w for _, w, _ in results(html)] == ["memory 95"]
    assert "project <b>tide</b>, semantic" not in html and "project <b>tide</b>, episodic" in html
    html = get(page(base, q="deploys frozen", kind="memories", project="tide", superseded=1))
    assert [w for _, w, _ in results(html)] == ["memory 95", "memory 94"]
    assert "superseded by" in html
    html = get(page(base, q="deploys", kind="memories", sector="procedural"))
    assert [w for _, w, _ in results(html)] == ["memory 96"] and "<b>billing</b>" in html
    assert state() == before


def test_a_bad_option_is_one_line_on_the_page(served):
    base, _ = served
    html = get(page(base, q="deploy", mode="fuzzy"))
    assert re.search(r'<p class="message-error">mode must be one of [^<]+</p>', html)


def test_datasettes_own_pages_search_facets_and_sql_work_on_the_index(served):
    base, _ = served
    assert 'name="_search"' in get(f"{base}/mem/chunks")  # the search box, from chunks_fts
    rows = json.loads(get(f"{base}/mem/chunks.json?_search=freeze&_shape=array&_col=path"))
    assert rows and all(r["path"] for r in rows)  # documents only: a memory's path is ''
    facets = json.loads(get(f"{base}/mem/chunks.json?_facet=kind&_size=0"))["facet_results"]
    counts = {f["value"]: f["count"] for f in facets["kind"]["results"]}
    assert counts["memory"] == 3 and counts["document"] > 50
    sql = "select hybrid_score(0.8, -4.2) as s, length(embed('tabs')) as n, hybridsql_debug() as d"
    got = json.loads(get(f"{base}/mem.json?sql={urllib.parse.quote(sql)}&_shape=array"))[0]
    assert got["s"] == pytest.approx(0.648732394366197) and got["n"] == 384 * 4
    assert "backend extension" in got["d"]
    vectors = json.loads(get(f"{base}/mem/vectors.json?_size=1&_shape=array"))
    assert vectors[0]["model_id"] == "all-MiniLM-L6-v2-int8"


def test_the_search_page_of_a_database_whose_name_datasette_encodes(example_db, tmp_path):
    """A file name with dots, spaces or non-ASCII letters: the database page's own link to the
    search page (its name tilde-encoded, `/team~2Enotes/-/hybridsql`) answers with results."""
    names = ["team.notes", "my notes", "café"]
    paths = [str(tmp_path / f"{name}.db") for name in names]
    for path in paths:
        shutil.copy(example_db, path)
    with datasette_serve(*paths, log=str(tmp_path / "datasette.log")) as base:
        for name in names:
            link = re.search(r'href="([^"]+/-/hybridsql)"', get(f"{base}/{tilde_encode(name)}"))
            assert link, f"the page of {name!r} has no link to its search page"
            href = link.group(1)
            assert href == f"/{tilde_encode(name)}/-/hybridsql" != f"/{name}/-/hybridsql"
            query = urllib.parse.urlencode({"q": QUERY, "now": "2026-11-22"})
            html = get(f"{base}{href}?{query}")
            assert f"<h1>Hybrid search: {name}</h1>" in html
            found = results(html)
            assert found and found[0][1].startswith("MEMORY.md:")
            row = found[0][0]
            assert row.startswith(href.removesuffix("/-/hybridsql") + "/chunks/")
            rows = json.loads(get(f"{base}{row}.json?_shape=objects"))["rows"]
            assert rows[0]["path"] == "MEMORY.md"


LONG_TEXTS = (
    "with r(i) as (select 1 union all select i+1 from r where i<{rows})"
    " select length(embed(replace(hex(zeroblob(2500000)),'0', i || 'b '))) from r"
)


def timed_json(url: str) -> tuple[float, int, dict]:
    """(seconds, HTTP status, JSON body) of a GET."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    return time.monotonic() - started, status, json.loads(body)


def test_a_query_that_embeds_long_texts_stops_at_datasettes_time_limit(tmp_path):
    """The issue's statement: 20 and 100 texts of 7.5 MB, each of which the model reads in 8
    windows. Datasette checks its limit every 1,000 SQLite steps, which this statement barely
    takes: it answered after 33 s (73 s with 100 rows), every row's embed() done. Now it ends
    within one embed() of the limit.

    What is compared is a count of embed()s, not seconds: the time past the limit against what
    one embed() of such a text takes here, measured just before. A load that changes between
    the two can make one embed() several times slower than measured (issue 39, item 8: 2.52 s
    past the limit against 2.13 measured, at load 20), so the bound is a quarter of the rows'
    embed()s, 5 and 25 of them: still 4 times under what the rows take without the interrupt."""
    path = str(tmp_path / "plain.db")
    sqlite3.connect(path).execute("create table notes(text)").connection.close()
    args = ("--setting", "sql_time_limit_ms", "1000")
    with datasette_serve(path, log=str(tmp_path / "datasette.log"), args=args) as base:

        def query(sql: str) -> tuple[float, int, dict]:
            return timed_json(f"{base}/plain.json?sql={urllib.parse.quote(sql)}&_shape=array")

        # The model loads at the first embed(), inside that query's limit: on a busy machine
        # it may take longer and the query is interrupted; the next finds the model loaded.
        warm = [query("select length(embed('deploy')) as n") for _ in range(2)]
        assert warm[-1][1:] == (200, [{"n": 384 * 4}])
        # What one embed() of such a text takes here, now: the slowest of three, so that a load
        # that comes and goes is measured where it is.
        seconds = max(query(LONG_TEXTS.format(rows=1))[0] for _ in range(3))
        for rows in (20, 100):
            elapsed, status, answer = query(LONG_TEXTS.format(rows=rows))
            assert status == 400 and "SQL query took too long" in answer["error"]
            embeds_past_the_limit = (elapsed - 1.0) / max(0.5, seconds)
            assert embeds_past_the_limit < rows / 4, (rows, elapsed, seconds)


# -- Pythons that cannot load extensions --------------------------------------------------------

NEAREST = (
    "select chunk_id, round(score, 6) as score from vectors"
    " where vector match (select vector from vectors where chunk_id = 5) and k = 3"
)


def test_datasette_runs_on_pysqlite3_whose_vector_index_answers_and_says_nothing(served):
    """What `pip install "hybridsql[datasette]"` gives where pysqlite3 has a wheel: Datasette
    runs on it (its /-/versions says so), the vector_index table answers as through apsw, and
    hybridsql has nothing to say in the server's output."""
    pytest.importorskip("pysqlite3", reason="pysqlite3 has no wheel for this platform")
    base, path = served
    assert "pysqlite3" in json.loads(get(f"{base}/-/versions.json"))
    got = json.loads(get(f"{base}/mem.json?sql={urllib.parse.quote(NEAREST)}&_shape=array"))
    want = [{"chunk_id": i, "score": s} for i, s in hybridsql.connect(path).execute(NEAREST)]
    assert got == want and len(want) == 3
    with open(path + ".log") as f:
        assert not [line for line in f if line.startswith("hybridsql")]


def datasette_get(database: str, url: str) -> subprocess.CompletedProcess:
    """`datasette serve DATABASE --get URL` on Python's own sqlite3 (pysqlite3 hidden)."""
    return subprocess.run(
        [DATASETTE, "serve", database, "--get", url],
        env={**os.environ, **WITHOUT_PYSQLITE3},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_on_a_sqlite3_that_cannot_load_extensions_datasette_hears_why_once(example_db, tmp_path):
    """Where Python's sqlite3 cannot load extensions and pysqlite3 is not installed: Datasette
    refuses an index (its check of every table meets vector_index), after hybridsql's one line
    that says why and what to install; a database without vector_index tables is served with the
    SQL functions in Python, the line said once for all of Datasette's connections."""
    if STDLIB_LOADS_EXTENSIONS:
        pytest.skip("this Python's own sqlite3 loads extensions: nothing falls back")
    out = datasette_get(example_db, "/-/versions.json")
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and lines[0] == PYTHON_ONLY_LINE
    assert lines.count(PYTHON_ONLY_LINE) == 1
    assert (
        lines[-1] == f"Error: Connection to {example_db} failed check: no such module: vector_index"
    )
    plain = str(tmp_path / "plain.db")
    sqlite3.connect(plain).execute("create table notes(text)").connection.close()
    sql = "select round(hybrid_score(0.8, -4.2), 6) as s, hybridsql_debug() like '%backend numpy%' as p"
    out = datasette_get(plain, f"/plain.json?sql={urllib.parse.quote(sql)}&_shape=array")
    assert (out.returncode, out.stderr) == (0, PYTHON_ONLY_LINE + "\n")
    assert json.loads(out.stdout) == [{"s": 0.648732, "p": 1}]
