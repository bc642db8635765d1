"""bm25_candidate(): the FTS5 function that drops rows which cannot make the n best by bm25()
before bm25() reads their lengths. With it, `order by bm25() limit n` must give what it gives
without it, on a real collection (SciFact abstracts and claims), with filters and in the shell."""

import json
import os
import shutil
import subprocess

import apsw
import pytest
from conftest import SCIFACT

import hybridsql
from hybridsql.search import keyword_plan

PLAIN = "select rowid, bm25(t) from t where t match ?1 {where} order by bm25(t) limit ?2"
WITH = "select rowid, bm25(t) from t where t match ?1 and {test} order by bm25(t) limit ?2"


def read_jsonl(name, limit):
    with open(os.path.join(SCIFACT, name)) as f:
        return [json.loads(line) for _, line in zip(range(limit), f, strict=False)]


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
                for i, d in enumerate(read_jsonl("corpus.jsonl", 3000))
            ],
        )
    claims = [keyword_plan(q["text"]).match for q in read_jsonl("queries.jsonl", 200)]
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
        fast = conn.execute(WITH.format(test="bm25_candidate(t, ?2)"), (match, n)).fetchall()
        same(plain, fast)


def test_it_drops_rows(scifact):
    """It must be doing something: most rows matching a long claim are dropped."""
    conn, claims = scifact
    kept = matched = 0
    for match in claims[:50]:
        kept += conn.execute(
            "select count(*) from t where t match ? and bm25_candidate(t, 10)", (match,)
        ).fetchone()[0]
        matched += conn.execute("select count(*) from t where t match ?", (match,)).fetchone()[0]
    assert kept < matched / 3


def test_filters_first_in_a_case(scifact):
    """Rows a filter rejects must not count toward the n best: CASE tests the filter first."""
    conn, claims = scifact
    for match in claims[:100]:
        plain = conn.execute(PLAIN.format(where="and rowid % 7 = 3"), (match, 10)).fetchall()
        test = "case when rowid % 7 = 3 then bm25_candidate(t, ?2) else 0 end"
        fast = conn.execute(WITH.format(test=test), (match, 10)).fetchall()
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
        "select rowid from t where t match 'tabs OR spaces' and bm25_candidate(t, 1)"
        " order by bm25(t) limit 1;"
    )
    shell = shutil.which("sqlite3")
    proc = subprocess.run(
        [shell, ":memory:", "-cmd", f".load {hybridsql.loadable_path()}", sql],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.stdout.split() == ["1"]
