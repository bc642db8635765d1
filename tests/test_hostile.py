"""Hostile queries: whatever a user types, a search gives results or a clear error.

Generated queries mix FTS5 operators, SQL and LIKE syntax, quotes, control characters, invalid
UTF-8 (as Python sees it: lone surrogates from ``surrogateescape``, U+FFFD from ``replace``), CJK
with ASCII, emoji, combining marks and long repetitions, and go through ``HybridIndex.search``
(every mode, random options) and ``MemoryStore.search`` on the example memory folder with a few
memories added. A search must return results (finite scores, at most ``max_results``) or raise
a ``HybridSQLError``; anything else fails, unless it is one of the KNOWN_BUGS below, which are
counted apart and each pinned by a strict xfail test.

The suite runs a deterministic sample; the long run is documented in docs/reliability.md:
HYBRIDSQL_HOSTILE_QUERIES=100000 pytest -s tests/test_hostile.py -k sample
"""

import math
import os
import random
import shutil
from collections import Counter

import apsw
import pytest

from hybridsql.errors import HybridSQLError
from hybridsql.index import HybridIndex
from hybridsql.memory import MemoryStore
from hybridsql.search import BACKENDS, FUSIONS, KEYWORD_NORMS, _like_pattern, keyword_plan

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
        "max_results": rng.choice([1, 3, 10, 50]),
        "min_score": rng.choice([0.0, 0.1, 0.5]),
        "candidate_pool": rng.choice([1, 10, 100, 1000]),
    }


# Failures that are bugs in search.py, embed.py and memory.py, reported with reproducers in
# docs/reliability.md. Each predicate is as narrow as its bug; each bug has strict xfail tests
# below, so that when it is fixed they fail until the entry here and the markers go.
def _too_deep(exc, query):
    """996 or more LIKE terms are summed in one expression deeper than SQLite allows."""
    return (
        isinstance(exc, apsw.SQLError)
        and "Expression tree is too large" in str(exc)
        and len(keyword_plan(query).like_terms) >= 900
    )


def _pattern_too_long(exc, query):
    """A LIKE pattern over SQLite's 50000 bytes."""
    return (
        isinstance(exc, apsw.SQLError)
        and "LIKE or GLOB pattern too complex" in str(exc)
        and any(len(_like_pattern(t).encode()) > 50000 for t in keyword_plan(query).like_terms)
    )


def _surrogates(exc, query):
    """Lone surrogates (undecodable bytes) reach the embedder or a bound filter."""
    return isinstance(exc, UnicodeEncodeError) and any(0xD800 <= ord(c) <= 0xDFFF for c in query)


KNOWN_BUGS = {
    "over 995 LIKE terms: Expression tree is too large": _too_deep,
    "a word over 49998 bytes: LIKE or GLOB pattern too complex": _pattern_too_long,
    "lone surrogates: UnicodeEncodeError": _surrogates,
}


def outcome(search, query: str, mode: str, options: dict) -> str:
    """'results', 'clear error', a KNOWN_BUGS name, or raises AssertionError with the failure."""
    try:
        found = search(query, mode=mode, **options)
    except HybridSQLError:
        return "clear error"
    except Exception as exc:  # everything else is a failure, or a known bug
        for name, matches in KNOWN_BUGS.items():
            if matches(exc, query):
                return name
        raise AssertionError(f"{mode} search of {query[:200]!r} {options} raised {exc!r}") from exc
    limit = options.get("max_results", options.get("limit", 10))
    assert len(found) <= limit
    ids = [r.memory.id if hasattr(r, "memory") else r.id for r in found]
    assert len(set(ids)) == len(ids)
    assert all(math.isfinite(r.score) and r.score >= 0 for r in found), query
    return "results"


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
        return store.search(
            query, mode=mode, limit=options["max_results"], project=options["project"]
        )

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
                    {"max_results": options["max_results"], "project": project},
                )
            ] += 1
    print(f"\n{QUERIES} queries, {sum(tally.values())} searches: {dict(tally)}")
    assert tally["results"] > QUERIES // 2


BIG = 1_000_000
TOO_DEEP = pytest.mark.xfail(strict=True, raises=apsw.SQLError, reason="Expression tree too large")
TOO_LONG = pytest.mark.xfail(strict=True, raises=apsw.SQLError, reason="LIKE pattern too complex")


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
@pytest.mark.parametrize(
    "query",
    [
        pytest.param("x" * BIG, id="one 1 MB word", marks=TOO_LONG),
        pytest.param(" ".join(["wrd"] * (BIG // 4)), id="1 MB of one word", marks=TOO_DEEP),
        pytest.param("\x00\x01\x1b" * (BIG // 3), id="1 MB of control characters"),
        pytest.param("'\"" * (BIG // 2), id="1 MB of quotes"),
        pytest.param("部" * (BIG // 3), id="1 MB of one CJK run", marks=TOO_LONG),
        pytest.param("AND OR NOT NEAR( * ^ : " * (BIG // 24), id="1 MB of FTS5", marks=TOO_DEEP),
    ],
)
def test_one_megabyte_queries(index, query, mode):
    idx, _ = index
    try:
        found = idx.search(query, mode=mode)
    except HybridSQLError:
        return
    assert all(math.isfinite(r.score) for r in found)


@pytest.mark.xfail(strict=True, raises=apsw.SQLError, reason="Expression tree is too large")
def test_a_thousand_word_query_is_answered(index):
    """An agent pasting a page of text as its query: 996 words of 3 or more letters give 996
    LIKE terms, summed in one expression deeper than SQLite's limit of 1000."""
    idx, _ = index
    idx.search(" ".join(f"word{i}" for i in range(996)), mode="keyword")


@pytest.mark.xfail(strict=True, raises=apsw.SQLError, reason="LIKE or GLOB pattern too complex")
def test_a_fifty_kilobyte_word_is_answered(index):
    idx, _ = index
    idx.search("x" * 49999, mode="keyword")


SURROGATES = pytest.mark.xfail(strict=True, raises=UnicodeEncodeError, reason="lone surrogates")
INVALID = b"deploy \xff".decode("utf-8", "surrogateescape")  # how Python decodes argv bytes


@SURROGATES
def test_invalid_utf8_from_argv_is_answered_in_hybrid_mode(index):
    """hybridsql search $'deploy \\xff': the embedder encodes the text and fails."""
    idx, _ = index
    idx.search(INVALID, mode="hybrid")


@SURROGATES
def test_invalid_utf8_in_a_memory_filter_is_answered(index):
    _, store = index
    store.search("deploy", project=INVALID, mode="keyword")


@SURROGATES
def test_invalid_utf8_in_a_memory_is_stored_or_refused_clearly(index):
    _, store = index
    store.add(INVALID)


def test_invalid_utf8_in_keyword_mode_is_answered(index):
    idx, _ = index
    found = idx.search(INVALID, mode="keyword")
    assert found.keyword_tier == "fts" and len(found) > 0


def test_known_bug_predicates_match_only_their_bug():
    """Each KNOWN_BUGS entry takes its own failure and no other, nor an ordinary query."""
    failures = [
        (apsw.SQLError("Expression tree is too large (maximum depth 1000)"), " abc" * 1000),
        (apsw.SQLError("LIKE or GLOB pattern too complex"), "x" * 50001),
        (UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed"), "a\udcff"),
    ]
    for i, (exc, query) in enumerate(failures):
        assert [n for n, matches in KNOWN_BUGS.items() if matches(exc, query)] == [
            list(KNOWN_BUGS)[i]
        ]
        assert not any(matches(exc, "plain text") for matches in KNOWN_BUGS.values())
