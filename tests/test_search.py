"""Hybrid search: the one statement, keyword tiers, decay, limits, noise, and three backends."""

import itertools
import json
import os
import shutil
import subprocess
from datetime import datetime, timezone

import pytest
from conftest import HYBRIDSQL, read_scifact

import hybridsql
from hybridsql.errors import QueryError
from hybridsql.indexing.index import HybridIndex, transaction
from hybridsql.search import MAX_TERMS, _like_pattern, bounded, highlight_terms, keyword_plan

NOW = datetime(2026, 11, 21, tzinfo=timezone.utc).timestamp()
BACKENDS = ["extension", "numpy", "python"]


@pytest.fixture(scope="module")
def idx(example_db, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("search") / "search.db")
    shutil.copy(example_db, path)
    with HybridIndex(path, embedder="local") as index:
        yield index


def paths(found):
    return [r.path for r in found]


# -- the statement ----------------------------------------------------------------------------


def test_one_statement_with_knn_and_bm25(idx):
    found = idx.search("tabs or spaces", now=NOW)
    assert found.backend == "extension" and found.mode == "hybrid"
    sql = found.sql
    assert sql.count(";") == 0 and sql.lstrip().startswith("with ")
    for piece in (
        "vector match :query_vector",
        "chunks_fts match",
        "temporal_decay(",
        "limit :limit",
    ):
        assert piece in sql
    assert paths(found)[:2] == ["MEMORY.md", "memory/2026-11-14.md"]


def test_explain_runs_as_is_in_the_sqlite3_shell(idx, tmp_path):
    env = {**os.environ, "HYBRIDSQL_EMBEDDER": "local"}
    out = subprocess.run(
        [
            HYBRIDSQL,
            "search",
            "database migration",
            "--db",
            idx.db_path,
            "--explain",
            "--now",
            str(NOW),
            "--per-file",
            "0",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert "-- run after: .load " in out
    shell = subprocess.run(
        ["sqlite3", "-json", "-cmd", f".load {hybridsql.loadable_path()}", idx.db_path],
        input=out,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    in_shell = [row["id"] for row in json.loads(shell)]
    in_python = [r.id for r in idx.search("database migration", now=NOW, per_file=0)]
    assert in_shell == in_python and len(in_python) > 3


def test_result_fields(idx):
    found = idx.search("ERR_CONN_RESET", now=NOW)
    r = next(r for r in found if r.path == "memory/2026-08-19.md")
    assert r.kind == "document"
    assert 1 <= r.start_line <= r.end_line
    assert "<mark>ERR_CONN_RESET</mark>" in r.snippet
    assert r.match_type in ("keyword", "both")
    assert r.keyword_score == pytest.approx(1.0)
    expected_decay = 0.5 ** (
        (NOW - datetime(2026, 8, 19, tzinfo=timezone.utc).timestamp()) / 86400 / 30
    )
    assert r.decay == pytest.approx(expected_decay)
    assert r.score == pytest.approx(r.relevance * r.decay)
    assert r.relevance == pytest.approx(
        0.7 * max(0.0, (r.vector_score - 0.25) / 0.75) + 0.3 * r.keyword_score
    )


# -- keyword tiers and hostile text -----------------------------------------------------------


def test_snippets_mark_the_query_words_not_its_stopwords(idx):
    found = idx.search("how should python code be indented?", now=NOW)
    top = found[0]
    assert "<mark>Python</mark>" in top.snippet and "<mark>be</mark>" not in top.snippet
    assert highlight_terms("the who") == ["the", "who"]  # nothing but stopwords: keep them
    assert highlight_terms("is ERR_CONN_RESET back?") == [
        "ERR_CONN_RESET",
        "back",
        "ERR",
        "CONN",
        "RESET",
    ]


def test_a_long_query_is_planned_from_its_first_distinct_words():
    """A plan keeps the first MAX_TERMS distinct words (stopwords only when nothing else is
    left), and a snippet marks as many: what follows them cannot change either, so it is not
    read (a megabyte query cost half a second before its words reached SQL)."""
    head = "the " + " ".join(f"term{i}" for i in range(MAX_TERMS))
    tail = " " + " ".join(f"other{i}" for i in range(100_000))
    assert keyword_plan(head + tail) == keyword_plan(head)
    assert len(keyword_plan(head).any_of) == MAX_TERMS
    assert (
        highlight_terms(head + tail)
        == highlight_terms(head)
        == [f"term{i}" for i in range(MAX_TERMS)]
    )
    assert bounded(str(i) for i in itertools.count()) == [str(i) for i in range(MAX_TERMS)]


def test_keyword_plans():
    assert keyword_plan("tabs or spaces?").match == '"tabs" OR "spaces"'
    assert keyword_plan("ERR_CONN_RESET handling").match == '"ERR CONN RESET" OR "handling"'
    assert keyword_plan("the who").match == '"the" OR "who"'  # nothing but stopwords: keep them
    cjk = keyword_plan("数据库迁移 rollback 登录")
    assert cjk.table == "chunks_trigram"
    # the trigrams of 数据库迁移 and the word, OR-ed; 登录 is too short for trigrams: LIKE's
    assert cjk.match == '"数据库" OR "据库迁" OR "库迁移" OR "rollback"'
    assert cjk.like_terms == ["rollback", "登录"]
    without_fts5 = keyword_plan("数据库迁移 rollback 登录", fts=False)
    assert without_fts5.like_terms == ["数据库", "据库迁", "库迁移", "rollback", "登录"]
    assert keyword_plan("auth", prefix=True).match == '"auth" OR "auth"*'
    assert keyword_plan("auth ERR_X", prefix=True).any_of == ['"auth" OR "auth"*', '"ERR X"']


@pytest.mark.parametrize(
    "query,tier,expected",
    [
        ("ERR_CONN_RESET", "fts", "memory/2026-08-19.md"),
        ("数据库迁移", "fts", "memory/2026-11-18.md"),
        ("登录", "like", "memory/2026-11-18.md"),
        ("ログイン", "fts", "memory/2026-10-15.md"),
        ("idempot", "fts", "memory/projects/billing/2026-09-14.md"),  # porter: idempotency
        ("ledgerl", "like", "memory/projects/billing/2026-10-06.md"),  # inside ledgerline
    ],
)
def test_three_keyword_tiers(idx, query, tier, expected):
    found = idx.search(query, mode="keyword", now=NOW)
    assert found.keyword_tier == tier
    assert expected in paths(found)
    assert all(r.match_type == "keyword" for r in found)


def test_multi_word_queries_find_documents_with_only_some_words(idx):
    found = idx.search("zzzunknownword ERR_CONN_RESET", mode="keyword", now=NOW)
    assert "memory/2026-08-19.md" in paths(found)


HOSTILE = [
    '"',
    '""',
    "'",
    "*",
    "-",
    ":",
    "NEAR",
    "NEAR(a b)",
    "a AND",
    "OR OR",
    "NOT",
    "(",
    ")",
    "((a)",
    "a:b",
    "text:foo",
    '"unbalanced',
    "^start",
    "col:*",
    "+",
    "a -b",
    "{a b}",
    "[x]",
    "\\",
    "%",
    "_",
    "100%",
    "\x00",
    "\u200b",
    "数据库 OR NOT (",
    "ERR_CONN_RESET*",
    "🙂",
]


@pytest.mark.parametrize("query", HOSTILE)
@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_fts5_syntax_in_a_query_never_raises(idx, query, mode):
    idx.search(query, mode=mode, now=NOW)


def test_keyword_terms_keeps_the_rarest_words(idx):
    query = "the deploy runbook mentions ERR_CONN_RESET"
    every = idx.search(query, mode="keyword", now=NOW)
    rarest = idx.search(query, mode="keyword", keyword_terms=1, now=NOW)
    assert "kw_terms" in rarest.sql and "kw_terms" not in every.sql
    df = {
        term: idx.conn.execute(
            "select count(*) from chunks_fts where chunks_fts match ?", (term,)
        ).fetchone()[0]
        for term in keyword_plan(query).any_of
    }
    term = min((n, t) for t, n in df.items() if n)[1]
    matching = {
        r[0]
        for r in idx.conn.execute("select rowid from chunks_fts where chunks_fts match ?", (term,))
    }
    assert rarest.results and {r.id for r in rarest} <= matching
    assert len(rarest) < len(every)
    none = idx.search("zzzqqq xyzzy", mode="keyword", keyword_terms=2, now=NOW)
    assert none.results == [] and none.keyword_tier == "none"


def test_like_patterns_are_escaped(idx):
    assert _like_pattern("a%b_c\\") == "%a\\%b\\_c\\\\%"
    assert idx.search("%%% ___", mode="keyword", now=NOW).results == []


# -- scores, decay, limits, noise -------------------------------------------------------------


def test_undated_files_never_decay_and_dated_ones_do(idx):
    for r in idx.search("deployment rules", limit=20, now=NOW):
        name = r.path.rsplit("/", 1)[-1]
        if name[:4].isdigit():
            assert r.decay < 1.0
        else:
            assert r.decay == 1.0


def test_min_score_applies_before_decay_so_old_notes_stay_findable(idx):
    # 2026-08-03 is 110 days old: decay 0.08, far under min_score 0.1 after decay.
    found = idx.search("corrected me about tab indentation in tide-api", now=NOW, limit=20)
    old = [r for r in found if r.path == "memory/2026-08-03.md"]
    assert old and old[0].decay < 0.1 and old[0].score < 0.1 <= old[0].relevance


def test_more_results_never_change_the_top_result(idx):
    for q in ("caching", "on-call handoff", "login loop", "数据库"):
        one = idx.search(q, limit=1, now=NOW)
        many = idx.search(q, limit=15, now=NOW)
        assert [r.id for r in one] == [r.id for r in many][:1]


def test_without_decay_dated_notes_rank_by_relevance_alone(idx):
    found = idx.search("deployment rules", limit=20, now=NOW, decay=False)
    assert "temporal_decay(" not in found.sql
    assert any(r.path.startswith("memory/2026-") for r in found)
    assert all(r.decay == 1.0 and r.score == r.relevance for r in found)
    decayed = idx.search("deployment rules", limit=20, now=NOW)
    assert [r.id for r in found] != [r.id for r in decayed]


def test_now_is_unix_seconds_or_iso_text(idx):
    as_number = idx.search("deploy freeze", now=NOW)
    for now in ("2026-11-21", "2026-11-21T00:00:00Z", "2026-11-21T02:00:00+02:00", str(NOW)):
        found = idx.search("deploy freeze", now=now)
        assert [(r.id, r.score) for r in found] == [(r.id, r.score) for r in as_number]
    message = "now must be unix seconds or an ISO-8601 date or time like 2026-11-22, not 'today'"
    with pytest.raises(QueryError, match=f"^{message}$"):
        idx.search("deploy freeze", now="today")


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_by_file_gives_each_file_once_with_its_other_matches(idx, backend):
    options = {"now": NOW, "backend": backend}
    for query in ("deploy", "incident postmortem", "redis cache"):
        chunks = idx.search(query, limit=100, per_file=0, **options)
        best, others = {}, {}
        for r in chunks:
            best.setdefault(r.path, r)
            others.setdefault(r.path, []).append([r.start_line, r.end_line])
        assert len(best) < len(chunks)  # some file has several matching chunks
        files = idx.search(query, limit=100, group_by_file=True, **options)
        assert [(r.id, r.score) for r in files] == [(r.id, r.score) for r in best.values()]
        for r in files:
            expected = sorted(
                lines for lines in others[r.path] if lines != [r.start_line, r.end_line]
            )
            assert r.other_ranges == expected
        top = idx.search(query, limit=5, group_by_file=True, **options)
        assert [r.id for r in top] == [r.id for r in files][:5]


@pytest.mark.parametrize("query", ["xkqzv wplmr", "quantum chromodynamics lattice", "zxcvbnm"])
def test_no_real_match_returns_nothing(idx, query):
    assert idx.search(query, now=NOW).results == []


def test_modes(idx):
    semantic = idx.search("how should code be indented", mode="semantic", now=NOW)
    assert semantic.results and all(r.match_type == "semantic" for r in semantic)
    assert semantic[0].path in ("MEMORY.md", "memory/2026-11-14.md", "memory/2026-08-03.md")
    keyword = idx.search("indentation", mode="keyword", now=NOW)
    assert all(r.vector_score is None and r.match_type == "keyword" for r in keyword)


def test_document_search_leaves_memories_out(example_db, tmp_path):
    from hybridsql.memory import MemoryStore

    path = str(tmp_path / "mixed.db")
    shutil.copy(example_db, path)
    with HybridIndex(path, embedder="local") as index:
        before = index.search("ERR_CONN_RESET keep-alive", now=NOW)
        MemoryStore(index).add("ERR_CONN_RESET came back after the keep-alive change")
        after = index.search("ERR_CONN_RESET keep-alive", now=NOW)
        # the documents' partition of vectors, and the documents' own full-text table: no list of
        # the kind's ids (the one rowid list is the keyword candidates', whose cosine the table
        # gives) and no test of each keyword match's kind
        assert after.sql == before.sql and after.sql.count("rowid in") == 1
        assert "rowid in (select id from kw " in after.sql
        assert "and kind = :kind\n" in after.sql and "chunks_fts match" in after.sql
        assert after.results and all(r.kind == "document" for r in after)
        assert [(r.id, r.score) for r in after] == [(r.id, r.score) for r in before]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kind_the_index_holds_none_of_is_answered_without_its_statement(tmp_path, backend):
    """A memories-only index (a server's project index has no memory folder) searched for
    documents: nothing, without the statement; its memories are still searched by theirs, and
    once a document is indexed it is found."""
    from hybridsql.memory import MemoryStore
    from hybridsql.search.options import SearchOptions

    folder = tmp_path / "notes"
    folder.mkdir()
    with HybridIndex(str(tmp_path / "m.db"), embedder="local") as index:
        store = MemoryStore(index, document_options=SearchOptions(backend=backend))
        store.add("ERR_CONN_RESET came back after the keep-alive change")
        ran = []

        def trace(cursor, sql, bindings):
            ran.append(sql)
            return True

        index.conn.exec_trace = trace
        documents = store.search_documents("ERR_CONN_RESET keep-alive")
        memories = store.search("ERR_CONN_RESET keep-alive", reinforce=False)
        index.conn.exec_trace = None
        statements = [sql for sql in ran if sql.startswith("with ")]
        assert len(documents) == 0 and documents.sql.startswith("with ")
        assert [h.memory.content for h in memories] == [
            "ERR_CONN_RESET came back after the keep-alive change"
        ]
        assert statements == [memories.sql]  # the documents' was built, never run
        (folder / "net.md").write_text("# Network\n\nERR_CONN_RESET after keep-alive.\n")
        index.index_folder(str(folder))
        assert [r.path for r in store.search_documents("ERR_CONN_RESET keep-alive")] == ["net.md"]


def test_profile_columns_cannot_shadow_the_statements_own(idx):
    from hybridsql.search import Profile

    with pytest.raises(ValueError, match=r"would shadow the statement's own: \['keyword_tier'\]"):
        idx.searcher.search("x", profile=Profile(columns={"keyword_tier": "1"}))


def test_rrf_fusion(idx):
    found = idx.search("tabs or spaces", fusion="rrf", now=NOW)
    assert found[0].path in ("MEMORY.md", "memory/2026-11-14.md")
    assert all(0 < r.relevance <= 1 for r in found)


def test_mmr_keeps_the_best_first_and_diversifies(idx):
    plain = idx.search("incident postmortem", limit=5, now=NOW)
    mmr = idx.search("incident postmortem", limit=5, mmr=True, now=NOW)
    assert mmr[0].id == plain[0].id and len(mmr) == 5
    assert len({r.path for r in mmr}) >= len({r.path for r in plain})


def test_bad_options_are_clear_errors(idx):
    with pytest.raises(
        QueryError, match="^mode must be one of hybrid, keyword, semantic, not 'x'$"
    ):
        idx.search("a", mode="x")
    with pytest.raises(QueryError, match=r"^vector_floor must be in \[0, 1\), not 1$"):
        idx.search("a", vector_floor=1)


# -- three backends, one answer ---------------------------------------------------------------

EXAMPLE_QUERIES = [
    "tabs or spaces",
    "数据库迁移",
    "ログイン",
    "ERR_CONN_RESET",
    "deploy on friday",
    "login loop after SSO",
    "cache stampede",
    "postgres upgrade",
    "who is on call",
]


@pytest.mark.parametrize("query", EXAMPLE_QUERIES)
def test_backends_agree_on_the_examples(idx, query):
    answers = [idx.search(query, backend=b, limit=10, now=NOW) for b in BACKENDS]
    assert [a.backend for a in answers] == BACKENDS
    ids = [[r.id for r in a] for a in answers]
    assert ids[1:] == ids[:-1] and ids[0]
    for a in answers[1:]:
        assert [r.score for r in a] == pytest.approx([r.score for r in answers[0]], abs=1e-6)


@pytest.fixture(scope="module")
def scifact(tmp_path_factory):
    """300 SciFact abstracts (title and first 300 characters) and 25 test queries."""
    docs = read_scifact("corpus", 300)
    queries = [q["text"] for q in read_scifact("queries", 25)]
    index = HybridIndex(str(tmp_path_factory.mktemp("scifact") / "s.db"), embedder="local")
    with transaction(index.conn):
        index.conn.executemany(
            "insert into chunks(kind, path, text, created_at) values ('document', ?, ?, 0)",
            [(d["_id"], d["title"] + "\n" + d["text"][:300]) for d in docs],
        )
    index.embed_missing()
    yield index, queries
    index.close()


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_backends_agree_on_scifact(scifact, mode):
    index, queries = scifact
    for q in queries:
        answers = [
            index.search(q, backend=b, mode=mode, min_score=0.0, vector_floor=0.0, now=NOW)
            for b in BACKENDS
        ]
        ids = [[r.id for r in a] for a in answers]
        assert ids[1:] == ids[:-1] and len(ids[0]) == 10, q
        for a in answers[1:]:
            assert [r.score for r in a] == pytest.approx([r.score for r in answers[0]], abs=1e-6)


@pytest.mark.parametrize("functions", ["numpy", "python"])
def test_without_the_extension_the_same_ranking(scifact, idx, functions):
    """When the SQL extension cannot load, the statement ranks keywords with FTS5's own bm25()
    instead of bm25_candidate(), takes the vector candidates from VectorReader, reads the
    other candidates' vectors from vector_index's shadow tables and scores with the Python
    functions: the same results, on long SciFact claims (where bm25_candidate drops most rows)
    and on the example memory."""
    for index, queries in ((scifact[0], scifact[1]), (idx, EXAMPLE_QUERIES)):
        with HybridIndex(index.db_path, embedder="local", backend=functions) as plain:
            assert not plain.searcher.native
            for q in queries:
                for mode in ("keyword", "hybrid"):
                    want = index.search(q, mode=mode, min_score=0.0, now=NOW)
                    got = plain.search(q, mode=mode, min_score=0.0, now=NOW)
                    assert "bm25_candidate(" in want.sql and "bm25_candidate(" not in got.sql
                    assert [r.id for r in got] == [r.id for r in want], (q, mode)
                    assert [r.score for r in got] == pytest.approx(
                        [r.score for r in want], abs=1e-9
                    )


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_python_backends_read_again_only_the_blocks_that_changed(scifact, backend):
    index, _ = scifact
    index.search("cancer", backend=backend)
    blocks = dict(index.searcher.readers[backend].blocks)
    index.search("stem cells", backend=backend)
    assert index.searcher.readers[backend].blocks == blocks  # no change: the same blocks
    other = HybridIndex(index.db_path, embedder="local")  # another connection writes
    with transaction(other.conn):
        other.conn.execute(
            "insert into chunks(kind, path, text, created_at)"
            " values ('document', 'new', 'Axolotl limb regeneration', 0)"
        )
    other.embed_missing()
    other.close()
    found = index.search("axolotl limb regeneration", backend=backend, mode="semantic")
    now = index.searcher.readers[backend].blocks
    changed = [b for b in now if b not in blocks or now[b] is not blocks[b]]
    assert len(changed) == 1  # one block read again, the others kept
    assert found[0].path == "new"


def test_vectors_of_another_model_are_never_mixed_in(scifact, tmp_path):
    index, queries = scifact
    path = str(tmp_path / "two-models.db")
    index.conn.execute("vacuum into ?", (path,))
    with HybridIndex(path, embedder="local") as copy:
        with transaction(copy.conn):
            copy.conn.execute(
                "update vectors set model_id = 'some-other-model' where chunk_id % 2 = 0"
            )
        assert copy.conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        for backend in BACKENDS:
            found = copy.search(
                queries[0], backend=backend, mode="semantic", min_score=0, vector_floor=0
            )
            assert found.results and all(r.id % 2 == 1 for r in found)
        even = copy.conn.execute("select count(*) from chunks where id % 2 = 0").fetchone()[0]
        assert even >= 150
        assert copy.embed_missing() == even  # switching back re-embeds what the other model held


def test_a_query_searched_again_is_not_embedded_again(idx, monkeypatch):
    """An MCP search_memory searches the memories, then the documents, with one query: the
    second search takes the vector the first embedded (issue 42), and finds what it would."""
    from hybridsql.search import searcher

    embedded = []
    real = searcher.sql_embed
    monkeypatch.setattr(
        searcher, "sql_embed", lambda conn, text: embedded.append(text) or real(conn, text)
    )
    query = "which editor settings does the team share for cache tests"
    first = [r.as_dict() for r in idx.search(query, now=NOW)]
    assert [r.as_dict() for r in idx.search(query, now=NOW)] == first
    assert embedded == [query]
    idx.search(query + " again", now=NOW)
    assert embedded == [query, query + " again"]


def test_a_query_embedded_ahead_in_another_thread_is_searched_without_embedding(idx, monkeypatch):
    """A server embeds a search's query before it takes the index's lock, on a connection of
    the thread's own (issue 42): the search then embeds nothing on the index's connection and
    finds exactly what a search that embedded it there finds."""
    import threading

    from hybridsql.search import searcher

    query = "how do we keep the editor's cache between test runs"
    idx.searcher.recent.clear()
    alone = [r.as_dict() for r in idx.search(query, now=NOW)]
    idx.searcher.recent.clear()
    embedded = []
    real = searcher.sql_embed
    monkeypatch.setattr(
        searcher, "sql_embed", lambda conn, text: embedded.append(conn) or real(conn, text)
    )
    done = []
    thread = threading.Thread(target=lambda: done.append(idx.searcher.embed_ahead(query)))
    thread.start()
    thread.join()
    assert done == [True]
    assert len(embedded) == 1 and embedded[0] is not idx.conn  # the thread's own connection
    assert [r.as_dict() for r in idx.search(query, now=NOW)] == alone
    assert len(embedded) == 1  # the search took that vector
    assert idx.searcher.embed_ahead(query) is False  # known: not embedded again
    assert len(embedded) == 1


def test_indexes_sharing_query_vectors_embed_a_query_once(idx, example_db, tmp_path, monkeypatch):
    """A server's indexes share their queries' vectors (issue 42): a query another index
    searched is not embedded again, and finds what it finds when this index embeds it."""
    from hybridsql.search import searcher

    path = str(tmp_path / "other.db")
    shutil.copy(example_db, path)
    query = "what do the editor settings say about tabs"
    with HybridIndex(path, embedder="local") as other:
        alone = [r.as_dict() for r in other.search(query, now=NOW)]
        other.searcher.recent.clear()
        embedded = []
        real = searcher.sql_embed
        monkeypatch.setattr(
            searcher, "sql_embed", lambda conn, text: embedded.append(text) or real(conn, text)
        )
        shared = searcher.QueryVectors(4)
        monkeypatch.setattr(idx.searcher, "shared", shared)  # given back after the test
        other.searcher.shared = shared
        idx.searcher.recent.clear()
        idx.search(query, now=NOW)
        assert embedded == [query] and len(shared) == 1
        assert [r.as_dict() for r in other.search(query, now=NOW)] == alone
        assert embedded == [query]
        for i in range(5):  # the oldest is let go
            other.searcher.embed_ahead(f"{query} {i}")
        assert len(shared) == 4 and shared.get((other.embedder.model_id, query)) is None
