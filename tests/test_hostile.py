"""Hostile queries: whatever a user types, a search answers it.

Generated queries mix FTS5 operators, SQL and LIKE syntax, quotes, control characters, invalid
UTF-8 (as Python sees it: lone surrogates from ``surrogateescape``, U+FFFD from ``replace``), CJK
with ASCII, emoji, combining marks and long repetitions, and go through ``HybridIndex.search``
(every mode, random options) and ``MemoryStore.search`` on the example memory folder with a few
memories added. Every text is a valid query: a search must return results (finite scores, at
most ``limit``, possibly none); any exception fails the test, a ``HybridSQLError`` included.

The suite runs a deterministic sample; the long run is documented in docs/reliability.md:
HYBRIDSQL_HOSTILE_QUERIES=100000 pytest -s tests/test_hostile.py -k sample
"""

import json
import math
import os
import random
import shutil
import subprocess
from collections import Counter

import anyio
import apsw
import pytest
from conftest import HYBRIDSQL

from hybridsql.db.extension import loadable_path
from hybridsql.indexing.index import HybridIndex
from hybridsql.mcp.server import TOOLS
from hybridsql.memory import MemoryStore
from hybridsql.search import (
    BACKENDS,
    FUSIONS,
    KEYWORD_NORMS,
    MAX_TERM_CHARS,
    MAX_TERMS,
    keyword_plan,
)

QUERIES = int(os.environ.get("HYBRIDSQL_HOSTILE_QUERIES", "1500"))
# In the suite every query runs in keyword mode and every EMBED_EVERY-th also in hybrid and
# semantic mode on the local model (embedding is most of the time); the long run embeds all.
EMBED_EVERY = 1 if QUERIES > 10000 else 6
SEED = 20261121

# fmt: off
FTS5 = [
    "AND", "OR", "NOT", "NEAR", "NEAR(", "NEAR/3", ")", "(", '"', '""', "*", "^", ":", "-",
    "+", "{", "}", "text:", "{text heading}:", "chunks_fts", "rank", "bm25(chunks_fts)",
    "MATCH", ",", ".", "'", "AND NOT", "OR OR", "* *", '"unterminated', "NEAR(a b, -1)",
]
SQL = [
    "'", "''", '"', "`", "[", "]", ";", "--", "/*", "*/", "\\", "%", "_", "\\%", "%%",
    "'; drop table chunks; --", "' or 1=1 --", "union select * from sqlite_schema", "x'00'",
    ":fts_query", "?", "?1", "@p", "$x", ":like0", "chunks", "vectors", "meta", "sqlite_schema",
    "'); delete from memories; --", "\" or \"\"=\"", "escape '\\'", "glob", "||", "char(0)",
]
CONTROL = [chr(i) for i in range(32)] + [
    "\x7f", "\x1b[31m", "\x1b]0;title\x07", "\u0085", "\u2028", "\u2029", "\ufeff", "\u200b",
    "\u200d", "\u202e", "\u2066", "\ufffe", "\uffff", "\U0010ffff", "\x00\x00",
]
CJK = [
    "部署", "服务", "数据库迁移", "周五", "鬱", "龘", "𠀀", "𪚥", "デプロイ", "ｶﾀｶﾅ", "ひらがな",
    "배포한다", "한국어", "中文English混合", "全角ＡＢＣ１２３", "。，、「」", "〜", "㍻",
]
WORDS = [
    "deploy", "billing", "postgres", "PostgreSQL", "ERR_CONN_RESET", "tabs", "spaces",
    "python", "indentation", "migration", "ledgerline", "TIDE-1234", "INC-42", "harbor-gateway",
    "tide-api", "v1.2.3", "https://example.com/a?b=c&d=e", "maya@example.com", "2026-11-20",
    "the", "a", "of", "é", "e\u0301", "ﬁ", "Ⅻ", "١٢٣", "🚀", "👩‍💻", "Ω", "straße", "İ",
]
# fmt: on


def invalid_utf8(rng: random.Random) -> str:
    """Bytes that are not UTF-8, decoded as Python decodes file names and argv (lone
    surrogates) or as read_markdown does (U+FFFD)."""
    raw = bytes(
        rng.choice([0x80, 0xBF, 0xC0, 0xC1, 0xED, 0xF5, 0xFE, 0xFF, 0xE2, 0x82])
        for _ in range(rng.randint(1, 4))
    )
    raw = rng.choice([b"", b"abc", "部".encode()]) + raw + rng.choice([b"", b"def"])
    return raw.decode("utf-8", rng.choice(["surrogateescape", "replace"]))


def random_code_points(rng: random.Random) -> str:
    """Any code points but surrogates, weighted toward the low planes."""
    out = []
    for _ in range(rng.randint(1, 8)):
        cp = rng.choice(
            [
                rng.randrange(0x80),
                rng.randrange(0x800),
                rng.randrange(0x10000),
                rng.randrange(0x110000),
            ]
        )
        out.append(chr(cp if not 0xD800 <= cp <= 0xDFFF else 0xFFFD))
    return "".join(out)


PIECES = [
    lambda rng: rng.choice(FTS5),
    lambda rng: rng.choice(SQL),
    lambda rng: rng.choice(CONTROL),
    lambda rng: rng.choice(CJK),
    lambda rng: rng.choice(WORDS),
    lambda rng: rng.choice(WORDS),
    invalid_utf8,
    random_code_points,
]


def hostile_query(rng: random.Random) -> str:
    """One generated query: pieces of every category, glued in every way, sometimes long."""
    parts = []
    for _ in range(rng.randint(0, 12)):
        piece = rng.choice(PIECES)(rng)
        if rng.random() < 0.03:
            piece = piece * rng.choice([10, 100, 1000])
        parts.append(piece)
        parts.append(rng.choice([" ", " ", "", "\n", "\t", "  ", "_", "-", "/"]))
    return "".join(parts)


def random_options(rng: random.Random) -> dict:
    return {
        "backend": rng.choice(BACKENDS),
        "fusion": rng.choice(FUSIONS),
        "keyword_norm": rng.choice(KEYWORD_NORMS),
        "prefix": rng.random() < 0.3,
        "mmr": rng.random() < 0.2,
        "limit": rng.choice([1, 3, 10, 50]),
        "min_score": rng.choice([0.0, 0.1, 0.5]),
        "candidate_pool": rng.choice([1, 10, 100, 1000]),
    }


def outcome(search, query: str, mode: str, options: dict) -> str:
    """'hits' or 'no hits'; an exception raises AssertionError with the query that raised it."""
    try:
        found = search(query, mode=mode, **options)
    except Exception as exc:  # a HybridSQLError too: no text is an invalid query
        raise AssertionError(f"{mode} search of {query[:200]!r} {options} raised {exc!r}") from exc
    limit = options.get("limit", 10)
    assert len(found) <= limit
    ids = [r.memory.id if hasattr(r, "memory") else r.id for r in found]
    assert len(set(ids)) == len(ids)
    assert all(math.isfinite(r.score) and r.score >= 0 for r in found), query
    return "hits" if len(found) else "no hits"


@pytest.fixture(scope="module")
def index(example_db, tmp_path_factory):
    """The examples indexed on the local model, with memories in two projects."""
    db = str(tmp_path_factory.mktemp("hostile") / "hostile.db")
    shutil.copy(example_db, db)
    idx = HybridIndex(db, embedder="local")
    store = MemoryStore(idx)
    for i, text in enumerate(
        [
            "Maya wants 4 spaces in Python, never tabs",
            "ledgerline deploys on Fridays need a second reviewer",
            "部署 ledgerline 之前 先跑 迁移",
            "ERR_CONN_RESET came from the proxy idle timeout",
            "the billing export is a CSV with ; separators and 'quotes'",
        ]
    ):
        store.add(text, project=["tidewater", "side"][i % 2], sector="semantic")
    yield idx, store
    idx.close()


def memory_search(store):
    """MemoryStore.search with the options it takes, hostile values in the text filters."""

    def search(query, mode, **options):
        return store.search(query, mode=mode, limit=options["limit"], project=options["project"])

    return search


def test_sample_of_generated_queries(index):
    """QUERIES generated queries, every one in keyword mode and a share in hybrid and semantic
    mode, through HybridIndex.search and MemoryStore.search."""
    idx, store = index
    rng = random.Random(SEED)
    tally = Counter()
    for n in range(QUERIES):
        query = hostile_query(rng)
        options = random_options(rng)
        modes = ["keyword"] + (["hybrid", "semantic"] if n % EMBED_EVERY == 0 else [])
        for mode in modes:
            tally[outcome(idx.search, query, mode, options)] += 1
        if n % 10 == 0:  # memories: the filtered statement, and a write (the recall) per search
            project = rng.choice([None, "tidewater", query[:50]])
            tally[
                outcome(
                    memory_search(store),
                    query,
                    rng.choice(modes),
                    {"limit": options["limit"], "project": project},
                )
            ] += 1
        if (n + 1) % 10000 == 0:  # the long run takes an hour: show that it moves
            print(f"\n{n + 1} queries, {sum(tally.values())} searches: {dict(tally)}", flush=True)
    print(f"\n{QUERIES} queries, {sum(tally.values())} searches: {dict(tally)}")
    assert tally["hits"] > QUERIES // 2  # the words among the noise are found


BIG = 1_000_000


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize(
    "query, tier, paths",
    [
        pytest.param("x" * BIG, "none", [], id="one 1 MB word"),
        pytest.param(" ".join(["wrd"] * (BIG // 4)), "none", [], id="1 MB of one word"),
        pytest.param("\x00\x01\x1b" * (BIG // 3), "none", [], id="1 MB of control characters"),
        pytest.param("'\"" * (BIG // 2), "none", [], id="1 MB of quotes"),
        pytest.param("部" * (BIG // 3), "none", [], id="1 MB of one CJK run"),
        pytest.param(
            "AND OR NOT NEAR( * ^ : " * (BIG // 24),
            "fts",
            ["memory/2026-10-29.md"],  # "near-total outage": the operators are searched as words
            id="1 MB of FTS5",
        ),
    ],
)
def test_one_megabyte_queries_are_answered(index, query, tier, paths, mode):
    idx, _ = index
    found = idx.search(query, mode=mode)
    assert found.keyword_tier == tier
    assert [r.path for r in found] == paths
    assert all(math.isfinite(r.score) for r in found)


def test_a_thousand_word_query_is_answered(index):
    """An agent pasting a page of text as its query: the terms are capped (search.MAX_TERMS),
    so the statement stays within SQLite's expression depth."""
    idx, _ = index
    page = " ".join(f"word{i}" for i in range(996)) + " ledgerline"
    found = idx.search(page, mode="keyword")
    assert len(keyword_plan(page).like_terms) == MAX_TERMS
    assert found.keyword_tier in ("fts", "like", "none")


def test_a_fifty_kilobyte_word_is_answered(index):
    idx, _ = index
    assert idx.search("x" * 49999, mode="keyword").results == []
    assert all(len(t) <= MAX_TERM_CHARS for t in keyword_plan("y" * 60000).like_terms)


INVALID = b"deploy \xff".decode("utf-8", "surrogateescape")  # how Python decodes argv bytes


def test_invalid_utf8_from_argv_is_answered_in_hybrid_mode(index):
    """hybridsql search $'deploy \\xff': the undecodable byte becomes U+FFFD."""
    idx, _ = index
    found = idx.search(INVALID, mode="hybrid")
    assert found.results and found.keyword_tier == "fts"


def test_invalid_utf8_in_a_memory_filter_is_answered(index):
    _, store = index
    assert store.search("deploy", project=INVALID, mode="keyword").results == []


def test_invalid_utf8_in_a_memory_is_stored_with_a_replacement_character(index):
    _, store = index
    memory = store.add(INVALID + " rollback window")
    assert memory.content == "deploy \ufffd rollback window"


def test_invalid_utf8_in_keyword_mode_is_answered(index):
    idx, _ = index
    found = idx.search(INVALID, mode="keyword")
    assert found.keyword_tier == "fts" and len(found) > 0


def test_rowids_beyond_int64_select_nothing():
    """A rowid IN list given to vector_index whole: a value past int64 (a REAL in SQLite) is no
    rowid, and must not wrap onto another row's. In a subprocess, so that an abort in the
    sanitizer build fails this test, not the suite."""
    wrapped = 9999999999999999999 - 2**64
    sql = (
        "create virtual table v using vector_index(e float[2]);"
        f"insert into v(rowid, e) values ({wrapped}, '[1, 0]'), (7, '[0, 1]');"
        "select count(*) from v where e match '[1, 0]' and k = 5"
        " and rowid in (9999999999999999999, 18446744073709551615);"
    )
    shell = subprocess.run(
        ["sqlite3", ":memory:", f".load {loadable_path()}", sql],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (shell.returncode, shell.stdout.strip(), shell.stderr) == (0, "0", "")


# -- what the index writes grows with what it is given (issue 34, item 12) -------------------


def words(n: int) -> str:
    """About ``n`` characters of words, without a line break."""
    return ("deploy freeze canary rollback " * (n // 30 + 1))[:n].strip()


# Hostile shapes of a markdown text of about n characters. Every chunk stored its heading path
# whole, so one heading of n characters made a chunk every few thousand of its characters, each
# storing all n of them.
SHAPES = {
    "one huge heading": lambda n: f"# {words(n)}\n\nbody\n",
    "one huge line": lambda n: f"# notes\n\n{words(n)}\n",
    "deep nesting": lambda n: "".join(
        f"{'#' * level} {words(n // 12)}\n\n{words(n // 12)}\n\n" for level in range(1, 7)
    ),
    "many tiny headings": lambda n: "".join(f"{'#' * (i % 6 + 1)} h{i}\n" for i in range(n // 6)),
}


def stored_bytes(db: str) -> int:
    """The bytes of every value of every row of every table of ``db``, the shadow tables of
    FTS5 and vector_index included: what the index wrote, without SQLite's free space."""
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        total = 0
        schema = "select name, sql from sqlite_schema where type = 'table'"
        for table, sql in conn.execute(schema).fetchall():
            if sql.lower().startswith("create virtual"):
                continue  # its shadow tables are counted
            columns = [row[1] for row in conn.execute(f"pragma table_info('{table}')")]
            values = " + ".join(f'coalesce(length(cast("{c}" as blob)), 0)' for c in columns)
            total += conn.execute(f'select coalesce(sum({values}), 0) from "{table}"').get
        return total
    finally:
        conn.close()


def at_most_linear(written: dict, what: str) -> None:
    """``written``: bytes by input size, each size twice the one before: each doubling of the
    input may double what is written, with room to spare, never quadruple it."""
    sizes = sorted(written)
    for small, large in zip(sizes, sizes[1:], strict=False):
        assert written[large] <= 2.5 * written[small] + 4096, (what, written)


@pytest.mark.parametrize("shape", SHAPES)
def test_what_an_indexed_file_writes_grows_linearly(tmp_path, shape):
    written = {}
    for n in (20_000, 40_000, 80_000):
        folder = tmp_path / f"{n}"
        folder.mkdir()
        db = str(tmp_path / f"{n}.db")
        with HybridIndex(db, embedder="none") as idx:
            before = stored_bytes(db)
            (folder / "note.md").write_text(SHAPES[shape](n), encoding="utf-8")
            assert idx.index_folder(str(folder)).files_indexed == 1
        written[n] = stored_bytes(db) - before
    at_most_linear(written, shape)


def test_what_each_mcp_tool_writes_grows_linearly(tmp_path):
    """Every tool, each hostile shape in its text (a memory's content, a note's content, a
    query) at n, 2n and 4n characters, within the bounds: what the server writes to its index
    for a call grows at most linearly. Its short arguments (a note's title, topic and tags, a
    project) have bounds of their own: tests/test_mcp.py."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    def calls(text: str):
        yield "add", {"content": text}
        yield "supersede", {"memory_id": None, "content": text}
        yield "extract_memory", {"topic": "t", "title": "Hostile", "content": text}
        yield "search_memory", {"query": text}
        yield "reinforce", {"memory_id": None}
        yield "timeline", {"memory_id": None}
        yield "recent_memories", {}
        yield "delete", {"memory_id": None, "hard": True}

    async def session(db, folder, n, written):
        params = StdioServerParameters(
            command=HYBRIDSQL,
            args=["mcp", "--db", db, "--memory-dir", str(folder), "--embedder", "none"],
            env=dict(os.environ),
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            for shape, make in SHAPES.items():
                memory_id = None
                for tool, arguments in calls(make(n)):
                    if "memory_id" in arguments:
                        arguments["memory_id"] = memory_id
                    before = stored_bytes(db)
                    result = await client.call_tool(tool, arguments)
                    assert not result.is_error, (tool, shape, result.content[0].text[:200])
                    answer = json.loads(result.content[0].text)
                    if tool in ("add", "supersede"):
                        memory_id = answer["id"]
                    grown = max(0, stored_bytes(db) - before)  # a delete frees bytes
                    written.setdefault((tool, shape), {})[n] = grown

    written = {}
    for n in (12_000, 24_000, 48_000):  # a memory holds at most 100,000 characters
        folder = tmp_path / f"notes-{n}"
        folder.mkdir()
        anyio.run(session, str(tmp_path / f"{n}.db"), folder, n, written)
    assert {tool for tool, _ in written} == set(TOOLS)
    for what, by_size in written.items():
        at_most_linear(by_size, what)
