"""Reinforcement on recall: a memory a search returns gains salience once per session, the gains
of several sessions add up to a cap, and each relaxes with its half-life; the switch off (a search
that only looks, or a ranking without recall_boost) changes nothing."""

import math
import re

import pytest

from hybridsql.errors import QueryError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore, Ranking

DAY = 86400.0
TODAY = 1_795_000_000.0  # 2026-11-18


class Clock:
    def __init__(self, now=TODAY):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def index(tmp_path):
    idx = HybridIndex(str(tmp_path / "mem.db"), embedder="local")
    yield idx
    idx.close()


RANKING = {"recall_boost": 0.02, "recall_cap": 0.05, "recall_half_life_days": 10.0}


@pytest.fixture
def store(index):
    return MemoryStore(index, ranking=Ranking(**RANKING), clock=Clock())


def seed(store):
    """Two memories: the one the query finds, and one it does not."""
    found = store.add("Alembic migrations run before the app starts", salience=0.5)
    other = store.add("The office plants are watered on Fridays", salience=0.5)
    return found, other


def salience_found(store, memory_id, **options):
    hits = store.search("alembic migrations", limit=1, **options)
    assert [h.memory.id for h in hits] == [memory_id]
    return hits[0].memory.salience


def test_repeated_recall_in_one_session_counts_once(store):
    m, other = seed(store)
    session = store.start_session("tide").id
    # The hit shows the salience after its own recall, and so does the memory.
    assert salience_found(store, m.id, recalled_in=session) == pytest.approx(0.52)
    for _ in range(3):
        store.clock.now += 60
        assert salience_found(store, m.id, recalled_in=session) == pytest.approx(0.52)
    assert store.get(m.id).salience == pytest.approx(0.52)
    assert store.get(other.id).salience == 0.5
    usages = store.conn.execute(
        "select count(*) from session_memories where memory_id = ? and usage = 'recalled'",
        (m.id,),
    ).fetchone()[0]
    assert usages == 4  # every recall is still linked; only the salience counts it once


def test_recall_in_several_sessions_adds_up_to_the_cap(store):
    m, _ = seed(store)
    expected = [0.52, 0.54, 0.55, 0.55]  # recall_cap 0.05
    for want in expected:
        session = store.start_session("tide").id
        assert salience_found(store, m.id, recalled_in=session) == pytest.approx(want)
    assert store.get(m.id).salience == pytest.approx(0.55)


def test_a_recall_relaxes_with_its_half_life(store):
    m, _ = seed(store)
    first = store.start_session("tide").id
    salience_found(store, m.id, recalled_in=first)
    store.clock.now += 10 * DAY  # one half-life
    assert store.get(m.id).salience == pytest.approx(0.51)
    store.clock.now += 10 * DAY
    assert store.get(m.id).salience == pytest.approx(0.505)
    # A recall in a new session adds a fresh 0.02 to what is left of the first.
    second = store.start_session("tide").id
    assert salience_found(store, m.id, recalled_in=second) == pytest.approx(0.525)
    # Recalled again in the first session: that session's gain starts afresh, not twice.
    assert salience_found(store, m.id, recalled_in=first) == pytest.approx(0.54)
    store.clock.now += 5 * DAY
    assert store.get(m.id).salience == pytest.approx(0.5 + 0.04 * 2**-0.5)


def test_the_ranking_uses_the_salience_it_shows(index):
    only_salience = Ranking(semantic=0, keyword=0, salience=1, recency=0, **RANKING)
    store = MemoryStore(index, ranking=only_salience, clock=Clock())
    m, other = seed(store)
    session = store.start_session("tide").id
    store.search("alembic migrations", limit=1, recalled_in=session)
    hits = {h.memory.id: h for h in store.search("alembic office", limit=2, reinforce=False)}
    boost = only_salience.sector_boost["semantic"]
    assert hits[m.id].memory.salience == pytest.approx(0.52)
    assert hits[m.id].score == pytest.approx(0.52 * boost)
    assert hits[other.id].score == pytest.approx(0.5 * boost)
    assert [h.memory.id for h in store.search("alembic", min_salience=0.51, reinforce=False)] == [
        m.id
    ]


def test_searches_without_a_session_recall_into_the_stores_own(index):
    first = MemoryStore(index, ranking=Ranking(**RANKING), clock=Clock())
    m, _ = seed(first)
    assert salience_found(first, m.id) == pytest.approx(0.52)
    assert salience_found(first, m.id) == pytest.approx(0.52)
    sessions = index.conn.execute("select id, project, ended_at from sessions").fetchall()
    assert len(sessions) == 1 and sessions[0][1:] == ("", None)
    second = MemoryStore(index, ranking=Ranking(**RANKING), clock=Clock())
    assert salience_found(second, m.id) == pytest.approx(0.54)
    assert first.get(m.id).salience == pytest.approx(0.54)


def test_the_defaults(index):
    store = MemoryStore(index, clock=Clock())
    assert (
        store.ranking.recall_boost,
        store.ranking.recall_cap,
        store.ranking.recall_half_life_days,
    ) == (0.02, 0.1, 7.0)
    m, _ = seed(store)
    for _ in range(8):
        session = store.start_session("tide").id
        salience_found(store, m.id, recalled_in=session)
    assert store.get(m.id).salience == pytest.approx(0.6)
    store.clock.now += 7 * DAY  # the cap bounds what is left: 8 recalls of 0.02, halved
    assert store.get(m.id).salience == pytest.approx(0.58)


def test_a_search_that_only_looks_changes_nothing(store):
    m, _ = seed(store)
    session = store.start_session("tide").id

    def state():
        tables = ("memories", "session_memories", "sessions")
        return [store.conn.execute(f"select * from {t} order by 1").fetchall() for t in tables]

    before = state()
    for _ in range(3):
        assert salience_found(store, m.id, recalled_in=session, reinforce=False) == 0.5
    salience_found(store, m.id, reinforce=False)
    assert state() == before
    assert store.get(m.id).salience == 0.5


def test_no_recall_boost_links_but_adds_no_salience(index):
    store = MemoryStore(index, ranking=Ranking(recall_boost=0), clock=Clock())
    m, _ = seed(store)
    for _ in range(3):
        session = store.start_session("tide").id
        assert salience_found(store, m.id, recalled_in=session) == 0.5
    assert store.get(m.id).salience == 0.5
    links = store.conn.execute(
        "select count(*) from session_memories where memory_id = ? and usage = 'recalled'",
        (m.id,),
    ).fetchone()[0]
    assert links == 3


def test_explicit_reinforcement_is_the_memorys_own_and_does_not_relax(store):
    m, _ = seed(store)
    session = store.start_session("tide").id
    salience_found(store, m.id, recalled_in=session)
    assert store.reinforce(m.id, 0.2).salience == pytest.approx(0.72)
    store.clock.now += 1000 * DAY
    assert store.get(m.id).salience == pytest.approx(0.7, abs=1e-12)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("recall_cap", 1.5, "ranking recall_cap must be in [0, 1], not 1.5"),
        ("recall_cap", -0.1, "ranking recall_cap must be in [0, 1], not -0.1"),
        ("recall_half_life_days", 0, "ranking recall_half_life_days must be > 0, not 0"),
        (
            "recall_half_life_days",
            math.inf,
            "ranking recall_half_life_days must be a finite number, not inf",
        ),
    ],
)
def test_bad_recall_numbers_are_refused(index, field, value, message):
    with pytest.raises(QueryError, match=re.escape(message)):
        MemoryStore(index, ranking=Ranking(**{field: value}))
