"""bm25_candidate(): bm25() for rows that can make the n best, NULL for the others, which it
drops before reading their lengths. Ordering by it must give what `order by bm25() limit n`
gives, ranks equal to the bit, on a real collection (SciFact abstracts and claims), with
filters and in the shell."""

import re
import shutil
import subprocess

import apsw
import pytest
from conftest import read_scifact

import hybridsql
from hybridsql.search import keyword_plan

PLAIN = "select rowid, bm25(t) from t where t match ?1 {where} order by bm25(t) limit ?2"
WITH = (
    "select id, rank from (select rowid as id, {rank} as rank from t where t match ?1)"
    " where rank is not null order by rank limit ?2"
)


@pytest.fixture(scope="module")
def scifact():
    """3,000 SciFact abstracts in an FTS5 table (as hybridsql indexes them), and 200 claims."""
    conn = hybridsql.connect(":memory:", backend="extension")
    conn.execute("create virtual table t using fts5(text, tokenize='porter unicode61')")
    with conn:
        conn.executemany(
            "insert into t(rowid, text) values (?, ?)",
            [
                (i + 1, d["title"] + "\n" + d["text"])
                for i, d in enumerate(read_scifact("corpus", 3000))
            ],
        )
    claims = [keyword_plan(q["text"]).match for q in read_scifact("queries", 200)]
    return conn, [m for m in claims if m]


def same(plain, fast):
    """The same ranks in the same order; ids too, except among rows tied on rank."""
    assert [r for _, r in fast] == [r for _, r in plain]
    ranks = [r for _, r in plain]
    for (a, r), (b, _) in zip(plain, fast, strict=True):
        if ranks.count(r) == 1:
            assert a == b


@pytest.mark.parametrize("n", [1, 10, 100])
def test_the_same_n_best_as_bm25(scifact, n):
    conn, claims = scifact
    for match in claims:
        plain = conn.execute(PLAIN.format(where=""), (match, n)).fetchall()
        fast = conn.execute(WITH.format(rank="bm25_candidate(t, ?2)"), (match, n)).fetchall()
        same(plain, fast)


def test_its_ranks_are_bm25s(scifact):
    """Every rank it gives is bm25()'s to the last bit, and asked twice about a row (as a
    flattened subquery asks) it answers the same."""
    conn, claims = scifact
    given = 0
    for match in claims[:50]:
        for ours, again, theirs in conn.execute(
            "select bm25_candidate(t, 10), bm25_candidate(t, 10), bm25(t) from t where t match ?",
            (match,),
        ):
            assert ours == again
            if ours is not None:
                assert ours == theirs
                given += 1
    assert given >= 500


def test_it_drops_rows(scifact):
    """It must be doing something: most rows matching a long claim are dropped."""
    conn, claims = scifact
    kept = matched = 0
    for match in claims[:50]:
        kept += conn.execute(
            "select count(*) from t where t match ? and bm25_candidate(t, 10) is not null",
            (match,),
        ).fetchone()[0]
        matched += conn.execute("select count(*) from t where t match ?", (match,)).fetchone()[0]
    assert kept < matched / 3


def test_filters_first_in_a_case(scifact):
    """Rows a filter rejects must not count toward the n best: CASE tests the filter first."""
    conn, claims = scifact
    for match in claims[:100]:
        plain = conn.execute(PLAIN.format(where="and rowid % 7 = 3"), (match, 10)).fetchall()
        rank = "case when rowid % 7 = 3 then bm25_candidate(t, ?2) end"
        fast = conn.execute(WITH.format(rank=rank), (match, 10)).fetchall()
        same(plain, fast)


@pytest.mark.parametrize("n", ["0", "10001", "'ten'", "null", "2.5"])
def test_n_must_be_an_integer_in_range(scifact, n):
    conn, _ = scifact
    with pytest.raises(
        apsw.SQLError, match="bm25_candidate\\(\\): 2nd argument n must be an integer"
    ):
        conn.execute(
            f"select rowid from t where t match 'cell' and bm25_candidate(t, {n})"
        ).fetchall()


def test_in_the_stock_shell():
    sql = (
        "create virtual table t using fts5(text);"
        "insert into t values ('tabs or spaces'), ('spaces only'), ('nothing here');"
        "select rowid, bm25_candidate(t, 1) = bm25(t) from t where t match 'tabs OR spaces'"
        " and bm25_candidate(t, 1) is not null order by bm25_candidate(t, 1) limit 1;"
    )
    shell = shutil.which("sqlite3")
    proc = subprocess.run(
        [shell, ":memory:", "-cmd", f".load {hybridsql.loadable_path()}", sql],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.split() == ["1|1"]


@pytest.mark.parametrize(
    "options",
    [
        "title, body",
        "title, body, detail=column",
        "title, body, detail=none",
        "title, body, content='', detail=none",
        "title, body, prefix='2 3'",
    ],
)
def test_every_kind_of_fts5_table(options):
    """Two columns, every detail level, contentless, prefix indexes: the same n best, and every
    rank it gives equal to bm25()'s."""
    conn = hybridsql.connect(":memory:", backend="extension")
    conn.execute(f"create virtual table t using fts5({options})")
    docs = read_scifact("corpus", 1000)
    with conn:
        conn.executemany(
            "insert into t(rowid, title, body) values (?, ?, ?)",
            [(i + 1, d["title"], d["text"]) for i, d in enumerate(docs)],
        )
    # One-word terms only: detail=column and none cannot match phrases.
    claims = [
        " OR ".join(f'"{w}"' for w in re.findall(r"[^\W_]+", q["text"]))
        for q in read_scifact("queries", 40)
    ] + ['"cell"* OR "protein"']
    if "detail=none" not in options:  # which has no column filters
        claims.append('title: "cancer" OR "gene"')
    for match in claims:
        plain = conn.execute(PLAIN.format(where=""), (match, 10)).fetchall()
        fast = conn.execute(WITH.format(rank="bm25_candidate(t, ?2)"), (match, 10)).fetchall()
        same(plain, fast)
        for ours, theirs in conn.execute(
            "select bm25_candidate(t, 10), bm25(t) from t where t match ?", (match,)
        ):
            assert ours is None or ours == theirs
