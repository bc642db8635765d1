"""The memory store: memories, sessions, links, the ranking in SQL, filters before the top-k,
timelines, the memory folder, and the ``hybridsql memory`` commands."""

import hashlib
import json
import math
import os
import re
import shutil
from datetime import datetime

import apsw
import click
import pytest

from hybridsql.cli import main
from hybridsql.errors import IndexingError, NotFoundError, QueryError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore, Ranking
from hybridsql.search import SearchOptions, explain_sql

DAY = 86400.0
TODAY = datetime(2026, 11, 21, 14, 30).timestamp()


class Clock:
    """A clock the tests move by hand."""

    def __init__(self, now=TODAY):
        self.now = now

    def __call__(self):
        return self.now

    def tick(self, seconds=1.0):
        self.now += seconds
        return self.now


@pytest.fixture
def index(tmp_path):
    idx = HybridIndex(str(tmp_path / "mem.db"), embedder="local")
    yield idx
    idx.close()


@pytest.fixture
def store(index):
    return MemoryStore(index, clock=Clock())


def ids(found):
    return [hit.memory.id for hit in found]


def add(store, content, **kw):
    """Adds a memory one second after the previous one, so that time order is insertion order."""
    store.clock.tick()
    return store.add(content, **kw)


# -- storing ---------------------------------------------------------------------------------


def test_a_memory_is_a_chunk_with_a_vector_and_fts_entries(store):
    m = store.add("Maya wants 4 spaces in Python", project="tide", sector="semantic", tier="global")
    assert (m.project, m.sector, m.tier, m.salience, m.created_at) == (
        "tide",
        "semantic",
        "global",
        0.5,
        TODAY,
    )
    assert (m.valid_until, m.deleted) == (None, False)
    conn = store.conn
    assert conn.execute("select kind, path, text from chunks where id = ?", (m.id,)).fetchone() == (
        "memory",
        "",
        "Maya wants 4 spaces in Python",
    )
    assert conn.execute("select count(*) from vectors where chunk_id = ?", (m.id,)).fetchone() == (
        1,
    )
    fts = "select rowid from memories_fts where memories_fts match 'spaces'"
    assert conn.execute(fts).fetchall() == [(m.id,)]
    documents = "select rowid from chunks_fts where chunks_fts match 'spaces'"
    assert (m.id,) not in conn.execute(documents).fetchall()  # each kind has its own index
    assert conn.execute("select temporal_decay('', 0, 30)").fetchone() == (1.0,)
    assert store.get(m.id) == m


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"content": "  "}, "content is empty"),
        (
            {"sector": "factual"},
            "sector must be one of episodic, semantic, procedural, emotional, reflective, not 'factual'",
        ),
        ({"salience": 1.5}, "salience must be in [0, 1], not 1.5"),
        ({"salience": "high"}, "salience must be a number, not str"),
        ({"tier": ""}, "tier must be one of session, project, global, not ''"),
        ({"tier": "bogus"}, "tier must be one of session, project, global, not 'bogus'"),
        ({"project": "p" * 201}, "project must be at most 200 characters, not 201"),
    ],
)
def test_add_rejects_bad_fields(store, kwargs, message):
    with pytest.raises(IndexingError, match=re.escape(message)):
        store.add(**{"content": "a fact", **kwargs})


def test_unknown_ids_are_clear_errors(store):
    with pytest.raises(NotFoundError, match=re.escape("no memory with id 42")):
        store.timeline(42)
    with pytest.raises(NotFoundError, match=re.escape("no session with id 7")):
        store.add("a fact", session_id=7)
    with pytest.raises(NotFoundError, match=re.escape("no memory with id 42")):
        store.session_context(42)


# -- ranking ---------------------------------------------------------------------------------


def expected_score(hit, salience, days, ranking=None):
    r = ranking or Ranking()
    cosine = hit.vector_score or 0.0
    semantic = (cosine - 0.25) / 0.75 if cosine >= 0.25 else 0.0
    base = (
        r.semantic * semantic
        + r.keyword * (hit.keyword_score or 0.0)
        + r.salience * salience
        + r.recency * math.exp(-r.recency_rate * days)
    )
    factor = r.superseded_factor if hit.is_superseded else 1.0
    return max(0.0, min(1.0, base * r.sector_boost[hit.memory.sector] * factor))


def test_score_is_the_memory_ranking_computed_by_the_one_statement(index):
    store = MemoryStore(index, ranking=Ranking(recall_boost=0), clock=Clock())
    old = store.add(
        "Deploys to production need a green staging run",
        sector="procedural",
        salience=0.9,
        created_at=TODAY - 10 * DAY,
    )
    new = store.add(
        "Production deploys are frozen from 2026-11-26",
        sector="episodic",
        salience=0.3,
        created_at=TODAY - 1 * DAY,
    )
    store.add("Maya likes tea", sector="emotional", salience=0.5)
    found = store.search("production deploys")
    assert sorted(ids(found)) == sorted([old.id, new.id])
    for hit in found:
        salience, days = (0.9, 10) if hit.memory.id == old.id else (0.3, 1)
        assert hit.score == pytest.approx(expected_score(hit, salience, days), abs=1e-9)
        assert hit.match_type == "both"
    # The statement alone, run as SQL, gives the same ranking and scores.
    rows = store.conn.execute(explain_sql(found.sql, found.params)).fetchall()
    assert [(r[0], pytest.approx(r[7])) for r in rows] == [(h.memory.id, h.score) for h in found]


def test_search_returns_each_memory_as_stored(store):
    added = add(
        store,
        "Rotate the JWT signing key every 90 days",
        project="tide",
        sector="procedural",
        tier="global",
        salience=0.7,
    )
    for mode in ("hybrid", "keyword", "semantic"):
        hit = store.search("JWT signing key rotation", mode=mode)[0]
        got = hit.memory
        assert (got.id, got.project, got.content, got.sector, got.tier) == (
            added.id,
            "tide",
            added.content,
            "procedural",
            "global",
        )
        assert got.created_at == added.created_at


def test_sector_boost_ranks_equal_memories(store):
    text = "The release train leaves every Tuesday"
    episodic = store.add(text, sector="episodic")
    reflective = store.add(text, sector="reflective")
    semantic = store.add(text, sector="semantic")
    found = store.search("release train Tuesday")
    assert ids(found) == [reflective.id, semantic.id, episodic.id]
    assert found[0].score / found[2].score == pytest.approx(1.2 / 0.8)


def test_the_ranking_is_configurable(index):
    only_salience = Ranking(
        semantic=0,
        keyword=0,
        salience=1,
        recency=0,
        sector_boost=dict.fromkeys(Ranking().sector_boost, 1.0),
    )
    store = MemoryStore(index, ranking=only_salience, clock=Clock())
    low = store.add("Kafka topic retention is seven days", salience=0.2)
    high = store.add("Kafka consumers commit offsets manually", salience=0.8)
    found = store.search("kafka")
    assert ids(found) == [high.id, low.id]
    assert [h.score for h in found] == pytest.approx([0.8, 0.2])
    with pytest.raises(QueryError, match=re.escape("ranking salience must be >= 0, not -1")):
        MemoryStore(index, ranking=Ranking(salience=-1))
    with pytest.raises(QueryError, match=re.escape("sector_boost has an unknown sector 'factual'")):
        MemoryStore(index, ranking=Ranking(sector_boost={"factual": 1.0}))


def test_recency_prefers_newer_memories(store):
    old = store.add("Redis eviction policy is volatile-lru", created_at=TODAY - 60 * DAY)
    new = store.add("Redis eviction policy is volatile-lru", created_at=TODAY - 2 * DAY)
    found = store.search("redis eviction policy")
    assert ids(found) == [new.id, old.id]
    difference = 0.15 * (math.exp(-0.05 * 2) - math.exp(-0.05 * 60)) * 1.1
    assert found[0].score - found[1].score == pytest.approx(difference)


def test_prefix_matching_and_highlighted_snippets(store):
    m = store.add("The authentication service moved to Okta SSO")
    found = store.search("auth", mode="keyword")
    assert ids(found) == [m.id]
    assert found[0].snippet == "The <mark>authentication</mark> service moved to Okta SSO"
    assert found[0].match_type == "keyword"


def test_match_types_follow_the_mode(store):
    m = store.add("Postgres 16 switchover is on Sunday at 03:00")
    assert [h.match_type for h in store.search("postgres switchover", mode="keyword")] == [
        "keyword"
    ]
    assert [h.match_type for h in store.search("postgres switchover", mode="semantic")] == [
        "semantic"
    ]
    assert [h.match_type for h in store.search("postgres switchover")] == ["both"]
    assert ids(store.search("database upgrade weekend", mode="semantic")) == [m.id]


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic"])
def test_fts5_syntax_in_user_text_never_raises(store, mode):
    m = store.add('Deploy checklist: NEAR the (payment) service, "quoted" and a*b')
    for query in [
        '"unbalanced',
        "deploy*",
        "NEAR(deploy checklist)",
        "(payment OR",
        "deploy AND",
        "-minus",
        "text:deploy",
        "*",
        '"',
        "''",
        "^start",
        'a"b"c',
        "NOT",
        ")(",
        "{x}",
        "",
        "payment NEAR/2 service",
        '"deploy" OR "checklist"',
    ]:
        store.search(query, mode=mode)
    assert ids(store.search('NEAR("payment" service', mode=mode)) == [m.id]


# -- filters, before the top-k ---------------------------------------------------------------


def test_superseded_memories_are_left_out_unless_asked(store):
    old = add(store, "Staging deploys go through Jenkins " + "and a long explanation " * 12)
    new = store.supersede(old.id, "Staging deploys go through GitHub Actions " + "x" * 300)
    assert ids(store.search("staging deploys")) == [new.id]
    found = store.search("staging deploys", include_superseded=True)
    assert ids(found) == [new.id, old.id]
    hit = found[1]
    assert hit.is_superseded and hit.memory.valid_until == new.created_at
    assert hit.superseded_by == {
        "id": new.id,
        "content": new.content[:200],
        "created_at": new.created_at,
    }
    assert len(hit.superseded_by["content"]) == 200
    assert found[0].superseded_by is None and not found[0].is_superseded
    assert hit.score == pytest.approx(expected_score(hit, 0.5, 0))
    with pytest.raises(
        IndexingError, match=re.escape(f"memory {old.id} is already superseded by memory {new.id}")
    ):
        store.supersede(old.id, "again")


@pytest.mark.parametrize("fusion", ["linear", "rrf"])
@pytest.mark.parametrize("mode", ["hybrid", "keyword", "semantic"])
def test_a_superseded_memory_ranks_below_its_successor_in_every_mode_and_fusion(
    index, mode, fusion
):
    """The old memory matches the query best on both sides, so it comes first where nothing
    marks it superseded: the ranking's superseded factor alone puts its successor above it."""
    store = MemoryStore(index, options=SearchOptions(fusion=fusion), clock=Clock())
    old = add(store, "Staging deploys run through Jenkins on every merge to main")
    new = store.supersede(old.id, "Staging deploys now run through GitHub Actions")
    query, options = "staging deploys Jenkins", {"mode": mode, "reinforce": False}
    found = store.search(query, include_superseded=True, **options)
    assert ids(found) == [new.id, old.id]
    unmarked = MemoryStore(
        index, ranking=Ranking(superseded_factor=1.0), options=store.options, clock=store.clock
    )
    assert ids(unmarked.search(query, include_superseded=True, **options)) == [old.id, new.id]


def test_sector_project_tier_and_salience_filters(store):
    made = {}
    for sector in ("episodic", "semantic", "procedural", "emotional", "reflective"):
        for project in ("tide", "billing"):
            made[sector, project] = add(
                store,
                f"Ledger note about invoices: {sector} {project}",
                sector=sector,
                project=project,
                tier="global" if sector == "semantic" else "project",
                salience=0.9 if sector == "reflective" else 0.4,
            )
    found = store.search("ledger invoices", sector="procedural", limit=20)
    assert sorted(ids(found)) == sorted(
        [made["procedural", "tide"].id, made["procedural", "billing"].id]
    )
    assert {h.memory.sector for h in found} == {"procedural"}
    found = store.search("ledger invoices", project="billing", limit=20)
    assert {h.memory.project for h in found} == {"billing"} and len(found) == 5
    found = store.search("ledger invoices", tier="global", limit=20)
    assert {h.memory.sector for h in found} == {"semantic"} and len(found) == 2
    found = store.search("ledger invoices", min_salience=0.85, limit=20)
    assert {h.memory.sector for h in found} == {"reflective"} and len(found) == 2
    with pytest.raises(QueryError, match=re.escape("sector must be one of episodic, semantic")):
        store.search("x", sector="factual")


def test_a_filtered_search_fills_its_limit_when_other_projects_dominate(index):
    store = MemoryStore(
        index, options=SearchOptions(prefix=True, min_score=0.0, candidate_pool=5), clock=Clock()
    )
    for i in range(12):
        add(store, f"Deploy checklist for the payment service, step {i}", project="payments")
    mine = [
        add(store, f"A deploy checklist entry for the search cluster, number {i}", project="search")
        for i in range(6)
    ]
    unfiltered = store.search("deploy checklist payment service", limit=5)
    assert {h.memory.project for h in unfiltered} == {"payments"}
    found = store.search("deploy checklist payment service", project="search", limit=5)
    assert len(found) == 5
    assert set(ids(found)) <= {m.id for m in mine}


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
def test_every_vector_backend_gives_the_same_filtered_ranking(index, mode):
    clock = Clock()
    options = {"prefix": True, "min_score": 0.0, "vector_floor": 0.0}  # every vector a candidate
    stores = {
        b: MemoryStore(
            index,
            options=SearchOptions(**options, backend=b),
            ranking=Ranking(recall_boost=0),
            clock=clock,
        )
        for b in ("extension", "numpy", "python")
    }
    texts = [
        "Users log in with Okta single sign-on",
        "The driver app refreshes its token hourly",
        "Passwords are hashed with argon2",
        "Invoices are sent on the first of the month",
        "Sessions expire after 30 minutes of inactivity",
        "Maya prefers 4 spaces in Python",
    ]
    for i, text in enumerate(texts):
        for project in ("billing", "tide"):
            add(
                stores["extension"],
                text,
                project=project,
                sector="episodic" if i % 3 else "semantic",
            )
    runs = {
        b: s.search("how do users sign in", project="tide", mode=mode, limit=4)
        for b, s in stores.items()
    }
    assert {r.backend for r in runs.values()} == {"extension", "numpy", "python"}
    assert len(runs["extension"]) == 4
    assert {h.memory.project for h in runs["extension"]} == {"tide"}
    assert ids(runs["numpy"]) == ids(runs["extension"]) == ids(runs["python"])
    for b in ("numpy", "python"):
        assert [h.score for h in runs[b]] == pytest.approx([h.score for h in runs["extension"]])
    # without a filter given, the ones left (not deleted, not superseded) keep most memories:
    # the vector side is the exact form, the rows vector_index hands best first tested by SQLite
    everywhere = {
        b: s.search("how do users sign in", mode=mode, limit=4) for b, s in stores.items()
    }
    assert ids(everywhere["numpy"]) == ids(everywhere["extension"]) == ids(everywhere["python"])
    assert "order by v.score desc limit :pool" in everywhere["extension"].sql
    assert "k = :pool" in runs["extension"].sql  # a project: the list of its ids, handed over
    # the filters read a memory's row alone: neither list joins the chunks to it
    assert (
        "exists (select 1 from memories m where m.chunk_id = v.rowid" in everywhere["extension"].sql
    )
    assert "rowid in (select m.chunk_id from memories m where" in runs["extension"].sql
    if mode == "hybrid":
        assert "memories_fts f join memories m on m.chunk_id = f.rowid" in runs["extension"].sql


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_without_the_extension_the_same_filtered_ranking(index, mode):
    """A project filter with keywords: bm25_candidate() behind the filter's CASE with the
    extension, bm25() behind a WHERE without it; the same memories, the same scores."""
    clock = Clock()
    options = SearchOptions(prefix=True, min_score=0.0, vector_floor=0.0)
    ours = MemoryStore(index, options=options, ranking=Ranking(recall_boost=0), clock=clock)
    for i in range(40):
        for project in ("billing", "tide"):
            words = ["users", "sign", "in", "with", "okta", "tokens", "expire", "hourly"]
            text = " ".join(words[(i + j) % len(words)] for j in range(3 + i % 5))
            add(ours, f"{text} note {i}", project=project)
    with HybridIndex(index.db_path, embedder="local", backend="python") as plain_index:
        plain = MemoryStore(
            plain_index, options=options, ranking=Ranking(recall_boost=0), clock=clock
        )
        for query in ("how do users sign in", "okta tokens", "hourly expire"):
            want = ours.search(query, project="tide", mode=mode, limit=10)
            got = plain.search(query, project="tide", mode=mode, limit=10)
            assert "then bm25_candidate(" in want.sql and "bm25_candidate(" not in got.sql
            assert len(want) == 10 and {h.memory.project for h in want} == {"tide"}
            assert ids(got) == ids(want), query
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-9)


# -- sessions and recall ---------------------------------------------------------------------


def test_session_filter_and_recall_links(store):
    s1, s2 = store.start_session("tide"), store.start_session("tide")
    a = add(store, "Celery workers use the Redis broker", session_id=s1.id)
    b = add(store, "Celery beat schedules the ETA recomputation", session_id=s1.id)
    c = add(store, "Celery retries carrier webhooks five times", session_id=s2.id)
    assert sorted(ids(store.search("celery", session_id=s1.id))) == [a.id, b.id]
    assert ids(store.search("redis broker", recalled_in=s2.id)) == [a.id]
    assert sorted(ids(store.search("celery", session_id=s2.id))) == [a.id, c.id]
    context = store.session_context(a.id)
    assert (context.session.id, context.usage, context.memory_count) == (s2.id, "recalled", 2)
    found = store.search("celery", session_id=s2.id)
    assert {h.source_session for h in found} == {s1.id, s2.id}
    assert [h.source_session for h in found if h.memory.id == a.id] == [s1.id]
    links = store.conn.execute(
        "select session_id, usage from session_memories where memory_id = ? order by rowid", (a.id,)
    ).fetchall()
    # The first search, filtered on s1, linked its results to s1.
    assert links == [(s1.id, "created"), (s1.id, "recalled")] + [(s2.id, "recalled")] * 3
    ended = store.end_session(s1.id, "set up Celery")
    assert (ended.summary, ended.ended_at) == ("set up Celery", store.clock())


def test_recall_raises_salience_once_per_session_up_to_one(store):
    m = store.add("Alembic migrations run before the app starts", salience=0.5)
    top = store.add("Alembic autogenerate misses server defaults", salience=0.99)
    found = store.search("alembic migrations")
    assert {h.memory.id: h.memory.salience for h in found} == pytest.approx(
        {m.id: 0.52, top.id: 1.0}
    )
    store.search("alembic")  # the store's own session again: counted once
    assert store.get(m.id).salience == pytest.approx(0.52)
    assert store.get(top.id).salience == 1.0
    store.search("alembic", recalled_in=store.start_session("tide").id)
    assert store.get(m.id).salience == pytest.approx(0.54)
    store.search("nothing like it at all: zebra", mode="keyword")
    assert store.get(m.id).salience == pytest.approx(0.54)


def test_a_search_that_does_not_reinforce_writes_nothing(store):
    session = store.start_session("tide")
    m = add(store, "Alembic migrations run before the app starts", session_id=session.id)
    add(store, "Alembic autogenerate misses server defaults", salience=0.7)

    def state():
        tables = ("memories", "session_memories", "memory_links", "sessions")
        return [store.conn.execute(f"select * from {t} order by 1, 2").fetchall() for t in tables]

    before = state()
    for _ in range(3):
        found = store.search("alembic migrations", recalled_in=session.id, reinforce=False)
        assert m.id in ids(found)
        assert {h.memory.id: h.memory.salience for h in found}[m.id] == 0.5
    assert state() == before
    store.search("alembic migrations", recalled_in=session.id)
    assert store.get(m.id).salience == pytest.approx(0.52)
    assert state() != before


def test_memory_search_no_reinforce_opens_the_file_read_only(tmp_path, capsys):
    db = tmp_path / "cli.db"
    run(capsys, "memory", "add", "Maya wants 4 spaces in Python", "--db", str(db))
    before = db.read_bytes()
    for _ in range(2):
        code, found = run(capsys, "memory", "search", "spaces", "--no-reinforce", "--db", str(db))
        assert code == 0 and [r["memory"]["salience"] for r in found["results"]] == [0.5]
    assert db.read_bytes() == before
    run(capsys, "memory", "search", "spaces", "--db", str(db))  # this one reinforces
    _, again = run(capsys, "memory", "search", "spaces", "--no-reinforce", "--db", str(db))
    assert [r["memory"]["salience"] for r in again["results"]] == [pytest.approx(0.52)]


def test_grouping_by_file_leaves_memory_search_as_it_is(index):
    # Memories have no file: each is its own group, so grouping changes nothing.
    clock = Clock()
    plain = MemoryStore(index, ranking=Ranking(recall_boost=0), clock=clock)
    grouped = MemoryStore(
        index,
        ranking=Ranking(recall_boost=0),
        options=SearchOptions(prefix=True, min_score=0.0, group_by_file=True),
        clock=clock,
    )
    for text in ("Redis is the Celery broker", "Redis keys expire after 60 s", "Redis runs 7.2"):
        add(plain, text)
    want = plain.search("redis")
    got = grouped.search("redis")
    assert len(want) == 3 and "file_rank = 1" in got.sql
    assert [(h.memory.id, h.score) for h in got] == [(h.memory.id, h.score) for h in want]


def test_session_context_is_the_latest_link(store):
    s1, s2 = store.start_session(), store.start_session()
    m = add(store, "Feature flags live in LaunchDarkly", session_id=s1.id)
    add(store, "Flags are cleaned up every quarter", session_id=s1.id)
    lonely = add(store, "No session wrote this")
    assert store.session_context(lonely.id) is None
    context = store.session_context(m.id)
    assert (context.session.id, context.usage, context.memory_count) == (s1.id, "created", 2)
    store.clock.tick()
    store.reinforce(m.id, 0.2, session_id=s2.id)
    context = store.session_context(m.id)
    assert (context.session.id, context.usage, context.memory_count) == (s2.id, "reinforced", 1)
    assert context.at == store.clock()


def test_reinforce_raises_salience_to_at_most_one(store):
    m = store.add("Use pathlib, not os.path", salience=0.6)
    assert store.reinforce(m.id).salience == pytest.approx(0.7)
    assert store.reinforce(m.id, 0.5).salience == 1.0
    with pytest.raises(IndexingError, match=re.escape("amount must be in (0, 1], not 0")):
        store.reinforce(m.id, 0)


def test_related_memory_count(store):
    a = add(store, "Grafana dashboards are provisioned from JSON")
    b = add(store, "Dashboards live in the ops repository")
    c = add(store, "Grafana alerts page the on-call engineer")
    store.relate(a.id, b.id)
    store.relate(c.id, a.id, "RELATED_TO", created_by="maya")
    store.relate(c.id, a.id)  # the same link again counts once
    counts = {h.memory.id: h.related_count for h in store.search("grafana dashboards", limit=5)}
    assert counts == {a.id: 2, b.id: 1, c.id: 1}
    assert store.conn.execute(
        "select created_by from memory_links where from_id = ?", (c.id,)
    ).fetchall() == [("maya",)]
    store.delete(c.id)
    assert {h.memory.id: h.related_count for h in store.search("grafana dashboards")}[a.id] == 1
    newer = store.supersede(b.id, "Dashboards moved to the platform repository")
    counts = {
        h.memory.id: h.related_count for h in store.search("dashboards", include_superseded=True)
    }
    assert counts == {a.id: 1, b.id: 2, newer.id: 1}
    with pytest.raises(
        IndexingError, match=re.escape("relation must be upper case, like RELATED_TO, not 'likes'")
    ):
        store.relate(a.id, newer.id, "likes")


# -- timeline --------------------------------------------------------------------------------


def test_timeline_order_and_sessions(store):
    s1, s2 = store.start_session("tide"), store.start_session("tide")
    tide = []
    for day in range(8):
        session = s1 if day < 4 else s2
        tide.append(
            store.add(
                f"Tide note of day {day}",
                project="tide",
                session_id=session.id,
                created_at=TODAY - (8 - day) * DAY,
            )
        )
        store.add(
            f"Billing note of day {day}", project="billing", created_at=TODAY - (8 - day) * DAY + 60
        )
    store.delete(tide[2].id)
    entries = store.timeline(tide[4].id, before=2, after=2)
    assert [e.offset for e in entries] == [-2, -1, 0, 1, 2]
    assert [e.memory.id for e in entries] == [
        tide[1].id,
        tide[3].id,
        tide[4].id,
        tide[5].id,
        tide[6].id,
    ]
    assert [e.session.id for e in entries] == [s1.id, s1.id, s2.id, s2.id, s2.id]
    everything = store.timeline(tide[0].id, before=3, after=20)
    assert [e.memory.content for e in everything] == [
        f"Tide note of day {d}" for d in (0, 1, 3, 4, 5, 6, 7)
    ]
    assert everything[0].offset == 0
    lonely = store.add("Billing note with no session", project="billing", created_at=TODAY)
    assert store.timeline(lonely.id, after=0)[-1].session is None
    with pytest.raises(NotFoundError, match=re.escape(f"memory {tide[2].id} is deleted")):
        store.timeline(tide[2].id)
    with pytest.raises(
        QueryError, match=re.escape("before must be an integer from 0 to 10000, not -1")
    ):
        store.timeline(tide[4].id, before=-1)


def test_recent_lists_a_projects_latest_memories_newest_first(store):
    session = store.start_session("tide")
    tide = [
        store.add(
            f"Tide note {n}", project="tide", session_id=session.id, created_at=TODAY - 10 + n
        )
        for n in range(5)
    ]
    store.add("Billing note", project="billing", created_at=TODAY - 1)
    store.delete(tide[3].id)
    newer = store.supersede(tide[1].id, "Tide note 1, corrected")
    entries = store.recent("tide", limit=3)
    assert [(e.offset, e.memory.id) for e in entries] == [
        (0, newer.id),
        (-1, tide[4].id),
        (-2, tide[2].id),
    ]
    assert entries[1].session.id == session.id
    with_old = store.recent("tide", limit=10, include_superseded=True)
    assert tide[1].id in [e.memory.id for e in with_old]
    assert tide[3].id not in [e.memory.id for e in with_old]
    assert store.recent("nobody") == []
    with pytest.raises(QueryError, match=re.escape("limit must be an integer from 1 to")):
        store.recent("tide", limit=0)


# -- deleting --------------------------------------------------------------------------------


def test_delete_hides_a_memory_and_hard_delete_removes_it(store):
    s = store.start_session()
    a = add(store, "The VPN uses WireGuard", session_id=s.id)
    b = add(store, "The VPN config is in 1Password", session_id=s.id)
    store.relate(a.id, b.id)
    store.delete(a.id)
    assert ids(store.search("vpn")) == [b.id]
    assert store.get(a.id).deleted
    assert store.session_context(b.id).memory_count == 1
    with pytest.raises(NotFoundError, match=re.escape(f"memory {a.id} is deleted")):
        store.delete(a.id)
    store.delete(b.id, hard=True)
    conn = store.conn
    for table, column in [
        ("chunks", "id"),
        ("vectors", "chunk_id"),
        ("memories", "chunk_id"),
        ("session_memories", "memory_id"),
        ("memory_links", "to_id"),
    ]:
        assert conn.execute(
            f"select count(*) from {table} where {column} = ?", (b.id,)
        ).fetchone() == (0,)
    assert (
        conn.execute(
            "select rowid from memories_fts where memories_fts match '1password'"
        ).fetchall()
        == []
    )
    with pytest.raises(NotFoundError, match=re.escape(f"no memory with id {b.id}")):
        store.get(b.id)


def test_a_memory_deleted_before_can_be_hard_deleted_and_its_text_purged(store):
    """Issue 34, item 16: a soft-deleted memory was refused ("memory N is deleted") by a hard
    delete, so its text stayed in the file for good."""
    m = add(store, "The old root password was hunter2")
    store.delete(m.id)
    store.delete(m.id, hard=True)
    conn = store.conn
    assert conn.execute("select count(*) from chunks where text like '%hunter2%'").get == 0
    assert conn.execute("select count(*) from memories where chunk_id = ?", (m.id,)).get == 0
    match = "select count(*) from memories_fts where memories_fts match 'hunter2'"
    assert conn.execute(match).get == 0
    with pytest.raises(NotFoundError, match=re.escape(f"no memory with id {m.id}")):
        store.delete(m.id, hard=True)


def test_hard_delete_forgets_the_cached_vector_unless_a_chunk_shares_its_text(store):
    """The embedding cache is keyed by the text's sha256: a hard-deleted memory's vector would
    stay in the file (and in the process's LRU) for ever, and give its text away."""
    a = add(store, "The staging password rotates on Mondays")
    b = add(store, "Shared wording")
    c = add(store, "Shared wording")

    def cached(text):
        """Whether the file holds the text's vector (in the cache, or in the index, which serves
        as the cache), and whether the process does."""
        key = hashlib.sha256(text.encode("utf-8")).digest()
        rows = store.conn.execute(
            "select count(*) from embedding_cache where text_sha256 = ?", (key,)
        ).fetchone()[0]
        rows += store.conn.execute(
            "select count(*) from chunks c join vectors v on v.chunk_id = c.id where c.text = ?",
            (text,),
        ).fetchone()[0]
        return rows > 0, key in store.index.embedder._lru

    assert cached(a.content) == (True, True)
    store.delete(a.id, hard=True)
    assert cached(a.content) == (False, False)
    store.delete(b.id, hard=True)  # c has the same text: its vector stays for re-indexing
    assert cached("Shared wording") == (True, True)
    store.delete(c.id, hard=True)
    assert cached("Shared wording") == (False, False)
    soft = add(store, "Soft-deleted memories keep their vectors")
    store.delete(soft.id)
    assert cached(soft.content) == (True, True)


# -- documents and the memory folder ---------------------------------------------------------


@pytest.fixture
def folder_store(tmp_path, example_db, memory_dir):
    """A store on a copy of the indexed examples, writing to a copy of the example folder."""
    db = str(tmp_path / "docs.db")
    shutil.copy(example_db, db)
    idx = HybridIndex(db, embedder="local")
    yield MemoryStore(idx, memory_dir=str(memory_dir), clock=Clock())
    idx.close()


def test_documents_stay_searchable_alongside_memories(folder_store):
    store = folder_store
    m = store.add("Ledgerline invoices are generated by a cron job", project="billing")
    docs = store.search_documents("ledgerline invoice run", limit=20)
    assert docs and {r.kind for r in docs} == {"document"}
    billing = store.search_documents("ledgerline invoice run", project="billing", limit=20)
    assert billing and all(r.path.startswith("memory/projects/billing/") for r in billing)
    assert any(not r.path.startswith("memory/projects/") for r in docs)
    assert ids(store.search("ledgerline invoices")) == [m.id]


def test_extract_memory_appends_an_entry_and_indexes_it(folder_store, memory_dir):
    store = folder_store
    entry = store.extract_memory(
        "deploys",
        "Canary first",
        "Roll out tide-api to 5 % first.\n# Why\nINC-0231.",
        ["deploy", "tide-api"],
    )
    assert entry.path == "memory/2026-11-21.md"
    text = (memory_dir / "memory" / "2026-11-21.md").read_text()
    assert text == (
        "# 2026-11-21\n\n## Canary first\n- topic: deploys\n- tags: deploy, tide-api\n"
        "- time: 14:30\n\nRoll out tide-api to 5 % first.\n### Why\nINC-0231.\n"
    )
    assert (entry.start_line, entry.end_line) == (3, 10)
    store.clock.tick(600)
    second = store.extract_memory("people", "Priya  is on call", "Primary next week.", [])
    text = (memory_dir / "memory" / "2026-11-21.md").read_text()
    assert text.endswith(
        "INC-0231.\n\n## Priya is on call\n- topic: people\n- time: 14:40\n\nPrimary next week.\n"
    )
    lines = text.splitlines()
    assert lines[second.start_line - 1] == "## Priya is on call"
    assert lines[second.end_line - 1] == "Primary next week."
    found = store.search_documents("canary rollout", limit=3)
    assert found[0].path == "memory/2026-11-21.md" and found[0].id in second.chunk_ids
    assert found[0].start_line <= entry.start_line and found[0].end_line >= entry.end_line
    with pytest.raises(IndexingError, match=re.escape("title is empty")):
        store.extract_memory("deploys", " ", "text")


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"title": "t" * 201}, "title must be at most 200 characters, not 201"),
        ({"topic": "t" * 5_000_000}, "topic must be at most 200 characters, not 5,000,000"),
        ({"tags": ["deploy", "x" * 201]}, "tag must be at most 200 characters, not 201"),
        ({"tags": [str(i) for i in range(21)]}, "tags must be a list of at most 20 tags, not a"),
        ({"tags": "deploy"}, "tags must be a list of at most 20 tags, not 'deploy'"),
    ],
)
def test_extract_memory_bounds_its_title_topic_and_tags(
    folder_store, memory_dir, arguments, message
):
    """Issue 34, item 12: a 5 MB title became a heading that each of thousands of chunks
    stored whole. Each name has a bound, refused with one line before anything is written."""
    note = memory_dir / "memory" / "2026-11-21.md"
    chunks = folder_store.conn.execute("select count(*) from chunks").get
    given = {"topic": "deploys", "title": "Canary", "content": "text", **arguments}
    with pytest.raises(IndexingError, match=re.escape(message)):
        folder_store.extract_memory(**given)
    assert not note.exists()
    assert folder_store.conn.execute("select count(*) from chunks").get == chunks
    most = {"topic": "o" * 200, "title": "i" * 200, "tags": ["a" * 200] * 20}
    entry = folder_store.extract_memory(content="text", **most)
    assert note.read_text().splitlines()[entry.start_line - 1] == "## " + "i" * 200


@pytest.mark.parametrize("link", ["memory", "memory/2026-11-21.md"])
def test_extract_memory_writes_nothing_through_a_link(folder_store, memory_dir, tmp_path, link):
    """memory/ linked to another folder, or today's note linked to another file: refused, and
    the other folder or file is left as it was."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "2026-11-21.md").write_text("someone else's file\n")
    if link == "memory":
        shutil.rmtree(memory_dir / "memory")
        os.symlink(outside, memory_dir / "memory")
    else:
        os.symlink(outside / "2026-11-21.md", memory_dir / link)
    message = (
        f"cannot write memory/2026-11-21.md in the memory folder {memory_dir}: "
        f"{link} is a symbolic link (links are not followed)"
    )
    with pytest.raises(IndexingError, match=re.escape(message)):
        folder_store.extract_memory("t", "title", "content")
    assert os.listdir(outside) == ["2026-11-21.md"]
    assert (outside / "2026-11-21.md").read_text() == "someone else's file\n"


def test_extract_memory_needs_a_folder(store):
    with pytest.raises(
        IndexingError, match=re.escape("no memory folder is configured (memory_dir)")
    ):
        store.extract_memory("t", "title", "content")


# -- the command line ------------------------------------------------------------------------


def run(capsys, *argv):
    code = main([*argv, "--embedder", "local"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


def test_memory_commands_print_json(tmp_path, capsys):
    db = ["--db", str(tmp_path / "cli.db")]
    assert run(capsys, "memory", "session", "start", "--project", "tide", *db)[1]["id"] == 1
    code, a = run(
        capsys,
        "memory",
        "add",
        "Maya wants 4 spaces in Python",
        "--project",
        "tide",
        "--sector",
        "procedural",
        "--session",
        "1",
        *db,
    )
    assert code == 0 and (a["sector"], a["project"]) == ("procedural", "tide")
    _, b = run(capsys, "memory", "supersede", str(a["id"]), "Maya wants ruff format, 4 spaces", *db)
    _, found = run(
        capsys, "memory", "search", "spaces", "--include-superseded", "--recalled-in", "1", *db
    )
    assert [r["memory"]["id"] for r in found["results"]] == [b["id"], a["id"]]
    assert found["results"][1]["superseded_by"]["id"] == b["id"]
    _, r = run(capsys, "memory", "reinforce", str(b["id"]), "--amount", "0.3", *db)
    assert r["salience"] == pytest.approx(0.82)
    _, tl = run(capsys, "memory", "timeline", str(b["id"]), *db)
    assert [e["offset"] for e in tl] == [-1, 0] and tl[0]["session"]["id"] == 1
    _, context = run(capsys, "memory", "session", "context", str(a["id"]), *db)
    assert (context["usage"], context["memory_count"]) == ("recalled", 2)
    _, ended = run(capsys, "memory", "session", "end", "1", "--summary", "style rules", *db)
    assert ended["summary"] == "style rules"
    assert run(capsys, "memory", "delete", str(b["id"]), *db)[1] == {
        "deleted": b["id"],
        "hard": False,
    }
    code, err = run(capsys, "memory", "timeline", str(b["id"]), *db)
    assert code == 1 and f"memory {b['id']} is deleted" in err and "Traceback" not in err
    code, err = run(capsys, "memory", "add", "x", "--salience", "2", *db)
    assert (code, err) == (1, "hybridsql: salience must be in [0, 1], not 2.0\n")


def test_memory_extract_and_documents_commands(tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    db = ["--db", str(tmp_path / "cli.db")]
    before = datetime.now()
    code, entry = run(
        capsys,
        "memory",
        "extract",
        "--topic",
        "ci",
        "--title",
        "Cache the venv",
        "--content",
        "CI restores .venv from the uv cache.",
        "--tag",
        "ci",
        "--memory-dir",
        str(folder),
        *db,
    )
    days = {f"memory/{day:%Y-%m-%d}.md" for day in (before, datetime.now())}  # midnight between
    assert code == 0 and entry["path"] in days
    assert os.path.exists(folder / entry["path"])
    _, found = run(capsys, "memory", "documents", "venv cache", *db)
    assert found["results"][0]["path"] == entry["path"]


def test_every_command_has_help_with_an_example(capsys):
    from hybridsql.cli import cli

    def commands(group, path):
        for name, command in group.commands.items():
            yield [*path, name], command
            if isinstance(command, click.Group):
                yield from commands(command, [*path, name])

    found = list(commands(cli, []))
    assert len(found) >= 20
    for argv, _ in found:
        assert main([*argv, "--help"]) == 0
        shown = capsys.readouterr().out
        assert re.search(r"\n  Examples:\n    (hybridsql|sqlite3) ", shown), argv


def test_a_memory_over_the_size_bound_is_refused_and_the_bound_is_configurable(
    tmp_path, monkeypatch
):
    with HybridIndex(str(tmp_path / "cap.db"), embedder="none") as idx:
        store = MemoryStore(idx)
        assert store.max_chars == 100_000
        kept = store.add("a" * 100_000, "p")
        message = (
            "a memory holds at most 100,000 characters, this one has 100,001: store a summary, "
            "or write the text to a file in the memory folder (HYBRIDSQL_MAX_MEMORY_CHARS "
            "raises the bound)"
        )
        with pytest.raises(IndexingError, match=re.escape(message)):
            store.add("b" * 100_001, "p")
        with pytest.raises(IndexingError, match=re.escape(message)):
            store.supersede(kept.id, "c" * 100_001)
        count = "select count(*) from memories"
        assert idx.conn.execute(count).fetchone()[0] == 1
        monkeypatch.setenv("HYBRIDSQL_MAX_MEMORY_CHARS", "10")
        small = MemoryStore(idx)
        with pytest.raises(IndexingError, match="a memory holds at most 10 characters"):
            small.add("eleven char", "p")
        assert small.add("ten chars!", "p").content == "ten chars!"
        monkeypatch.setenv("HYBRIDSQL_MAX_MEMORY_CHARS", "ten")
        with pytest.raises(
            IndexingError,
            match=re.escape("HYBRIDSQL_MAX_MEMORY_CHARS must be a whole number of characters"),
        ):
            MemoryStore(idx)


def test_a_hits_dict_is_asdicts_and_its_own(tmp_path):
    """MemoryHit, Memory and SearchResult answer as_dict() without dataclasses.asdict's deep copy
    of every number and string (a search answers a dozen per call): the same dict as asdict()
    gives, every field there, and containers of their own, so that changing the answer (the MCP
    server shortens texts in it) leaves the hit as it was."""
    from dataclasses import asdict

    from hybridsql.memory import MemoryStore
    from hybridsql.search.results import SearchResult

    store = MemoryStore(HybridIndex(str(tmp_path / "m.db"), embedder=None))
    old = store.add("the deploy runs on Fridays", "ops")
    new = store.supersede(old.id, "the deploy runs on Mondays")
    store.relate(new.id, old.id)
    hits = list(store.search("deploy", include_superseded=True, reinforce=False))
    assert {h.memory.id for h in hits} == {old.id, new.id}
    superseded = next(h for h in hits if h.memory.id == old.id)
    assert superseded.superseded_by["id"] == new.id and superseded.related_count == 1
    for hit in hits:
        answer = hit.as_dict()
        assert answer == asdict(hit) and list(answer) == list(asdict(hit))
        answer["memory"]["content"] = "changed"
        if answer["superseded_by"] is not None:
            answer["superseded_by"]["content"] = "changed"
        assert answer != asdict(hit) and hit.memory.content.startswith("the deploy")
        assert hit.superseded_by is None or hit.superseded_by["content"] != "changed"
        assert hit.memory.as_dict() == asdict(hit.memory)
    result = SearchResult(
        1,
        "document",
        "a.md",
        1,
        9,
        "# A",
        "text",
        "snip",
        0.5,
        0.5,
        0.4,
        None,
        1.0,
        "semantic",
        [[3, 4], [7, 9]],
        {"project": "p", "n": 2},
    )
    answer = result.as_dict()
    assert answer == asdict(result) and list(answer) == list(asdict(result))
    answer["other_ranges"][0][0] = 99
    answer["extra"]["n"] = 3
    assert result.other_ranges[0] == [3, 4] and result.extra["n"] == 2


def recalled_often(store, memories=40, sessions=1500) -> int:
    """``memories`` memories, each recalled once in each of ``sessions`` sessions, the sessions
    one after another (as a long-used index holds them: each session's recalls together);
    returns the count of recall rows."""
    for i in range(memories):
        add(store, f"deploy note {i}: the staging cluster runs migrations before traffic")
    ids_ = [m for (m,) in store.index.conn.execute("select chunk_id from memories")]
    rows = [(1 + s, m, "recalled", 1.0e9 + s) for s in range(sessions) for m in ids_]
    with store.index.conn:
        store.index.conn.executemany(
            "insert into session_memories(session_id, memory_id, usage, at) values (?, ?, ?, ?)",
            rows,
        )
    return len(rows)


def pages_of_a_search_again(store, query: str, status: int) -> tuple:
    """(the first search of ``query``, the same search again, the pages it fetched (CACHE_HIT)
    or read (CACHE_MISS))."""
    first = store.search(query, reinforce=False)
    store.index.conn.status(status, True)  # reset
    again = store.search(query, reinforce=False)
    return first, again, store.index.conn.status(status)[0]


def test_a_search_asked_again_reads_no_page_from_the_file_again(store):
    """A connection's page cache holds what a search reads (issue 42): at SQLite's default of
    2 MiB, a search that read more pages than that read every one of them from the file again
    the next time (the server bench's index of 2,000 memories and their recalls: 800 reads, 3
    MB, a search)."""
    recalled_often(store)
    conn = store.index.conn
    pages = conn.execute("pragma page_count").fetchone()[0]
    # more than SQLite's default cache holds
    assert pages * conn.execute("pragma page_size").fetchone()[0] > 3 * 2**20
    first, again, missed = pages_of_a_search_again(
        store, "staging migrations", apsw.SQLITE_DBSTATUS_CACHE_MISS
    )
    assert ids(again) == ids(first) and len(first) == 10
    assert missed == 0


def test_a_memorys_recall_history_is_read_from_one_index(store):
    """What a memory's recalls add to its rank is read, for every candidate of every search,
    from one index (session_memories_recalls), a range of it a memory: from the table, a search
    fetched a page for each recall row, and a long-used index holds many (issue 42)."""
    recalls = recalled_often(store)
    *_, fetched = pages_of_a_search_again(
        store, "staging migrations", apsw.SQLITE_DBSTATUS_CACHE_HIT
    )
    assert fetched < recalls / 2
