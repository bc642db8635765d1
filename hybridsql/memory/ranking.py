"""How memories rank: Ranking (every number of the formula), and memory_profile, the Profile
that puts the formula, the filters and the memory's columns into the one search statement."""

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from hybridsql.errors import QueryError
from hybridsql.memory.records import _SOURCE_SESSION, DAY, PREVIEW_CHARS, SECTORS, SUPERSEDES
from hybridsql.search import Profile, finite


@dataclass
class Ranking:
    """The numbers of the memory ranking; see hybridsql.memory's docstring for the formula."""

    semantic: float = 0.4
    keyword: float = 0.25
    salience: float = 0.2
    recency: float = 0.15
    recency_rate: float = 0.05  # per day
    sector_boost: dict = field(
        default_factory=lambda: {
            "reflective": 1.2,
            "semantic": 1.1,
            "procedural": 1.0,
            "emotional": 0.9,
            "episodic": 0.8,
        }
    )
    superseded_factor: float = 0.5
    recall_boost: float = 0.02  # salience a memory gains from each session a search returns it in
    recall_cap: float = 0.1  # the most salience recalls add, all sessions together
    recall_half_life_days: float = 7.0  # a recall's gain halves in this many days

    def recall_gain(self, recalled_at: Iterable[float], now: float) -> float:
        """The salience recalls add at ``now``, given when each session last recalled the
        memory: recall_boost per session, each halving every recall_half_life_days, all of them
        together at most recall_cap. RECALL_GAIN computes the same in SQL."""
        rate = self.params()["mem_recall_rate"]
        total = sum(math.exp(-rate * max(0.0, now - at)) for at in recalled_at)
        return min(self.recall_cap, self.recall_boost * total)

    def check(self) -> None:
        """Raises QueryError for a number no ranking can use."""
        numbers = [(n, getattr(self, n)) for n in RANKING_NUMBERS] + [
            (f"sector_boost of {sector}", boost) for sector, boost in self.sector_boost.items()
        ]
        for name, value in numbers:
            if not finite(value):
                raise QueryError(f"ranking {name} must be a finite number, not {value!r}")
        for name in ("semantic", "keyword", "salience", "recency", "recency_rate"):
            if getattr(self, name) < 0:
                raise QueryError(f"ranking {name} must be >= 0, not {getattr(self, name)!r}")
        for name in ("superseded_factor", "recall_boost", "recall_cap"):
            if not 0 <= getattr(self, name) <= 1:
                raise QueryError(f"ranking {name} must be in [0, 1], not {getattr(self, name)!r}")
        if self.recall_half_life_days <= 0:
            raise QueryError(
                f"ranking recall_half_life_days must be > 0, not {self.recall_half_life_days!r}"
            )
        for sector, boost in self.sector_boost.items():
            if sector not in SECTORS:
                raise QueryError(f"sector_boost has an unknown sector {sector!r}")
            if boost < 0:
                raise QueryError(f"sector_boost of {sector} must be >= 0, not {boost!r}")

    def params(self) -> dict:
        return {
            "mem_semantic": self.semantic,
            "mem_keyword": self.keyword,
            "mem_salience": self.salience,
            "mem_recency": self.recency,
            "mem_recency_rate": self.recency_rate,
            "mem_superseded_factor": self.superseded_factor,
            "mem_recall_boost": self.recall_boost,
            "mem_recall_cap": self.recall_cap,
            "mem_recall_rate": math.log(2) / (self.recall_half_life_days * DAY),
            **{f"mem_boost_{s}": float(self.sector_boost.get(s, 1.0)) for s in SECTORS},
        }


RANKING_NUMBERS = (
    "semantic",
    "keyword",
    "salience",
    "recency",
    "recency_rate",
    "superseded_factor",
    "recall_boost",
    "recall_cap",
    "recall_half_life_days",
)

# The salience a memory's recalls add (Ranking.recall_gain): over the last recall of each
# session that recalled the memory ``{id}``; ``:now`` is bound by the search.
RECALL_GAIN = (
    "(select min(:mem_recall_cap, :mem_recall_boost"
    " * total(exp(-:mem_recall_rate * max(0.0, :now - at))))"
    " from (select max(at) as at from session_memories"
    " where memory_id = {id} and usage = 'recalled' group by session_id))"
)
# A memory's salience as it ranks: its own (what add, reinforce and supersede set) and its recalls'.
SALIENCE = "min(1.0, m.salience + " + RECALL_GAIN.format(id="m.chunk_id") + ")"

# The relevance of a memory, over the columns of the search statement's ``scored`` CTE and the
# profile's columns below; ``:now`` is bound by the search.
RELEVANCE = (
    "max(0.0, min(1.0, (:mem_semantic * vector_score + :mem_keyword * keyword_score"
    " + :mem_salience * salience"
    f" + :mem_recency * exp(-:mem_recency_rate * max(0.0, :now - memory_created_at) / {DAY}))"
    " * case sector "
    + " ".join(f"when '{s}' then :mem_boost_{s}" for s in SECTORS)
    + " else 1.0 end"
    " * case when valid_until is null then 1.0 else :mem_superseded_factor end))"
)

COLUMNS = {
    "project": "m.project",
    "sector": "m.sector",
    "tier": "m.tier",
    "salience": SALIENCE,
    "own_salience": "m.salience",
    "valid_until": "m.valid_until",
    "memory_created_at": "m.created_at",
}

# What a memory found shows and nothing ranks by, computed for the memories returned alone:
# over ``hit.id``, the memory's chunk id (Profile.late).
SHOWN = {
    "source_session": _SOURCE_SESSION.format(id="hit.id"),
    "superseded_by": (
        f"(select json_object('id', n.chunk_id, 'content', substr(nc.text, 1, {PREVIEW_CHARS}),"
        " 'created_at', n.created_at) from memory_links l"
        " join memories n on n.chunk_id = l.from_id join chunks nc on nc.id = n.chunk_id"
        f" where l.to_id = hit.id and l.relation = '{SUPERSEDES}' and n.deleted = 0"
        " order by n.created_at desc limit 1)"
    ),
    "related_count": (
        "(select count(*) from memories o where o.deleted = 0 and o.chunk_id in"
        " (select to_id from memory_links where from_id = hit.id"
        " union select from_id from memory_links where to_id = hit.id))"
    ),
}


def memory_profile(
    ranking: Ranking,
    project: str | None = None,
    sector: str | None = None,
    tier: str | None = None,
    min_salience: float = 0.0,
    include_superseded: bool = False,
    session_id: int | None = None,
) -> Profile:
    """The Profile of a memory search: the filters given, the ranking, the result columns."""
    filters, params = ["m.deleted = 0"], ranking.params()
    if not include_superseded:
        filters.append("m.valid_until is null")
    given = [
        ("m.project = :mem_project", "mem_project", project),
        ("m.sector = :mem_sector", "mem_sector", sector),
        ("m.tier = :mem_tier", "mem_tier", tier),
        (f"{SALIENCE} >= :mem_min_salience", "mem_min_salience", min_salience or None),
        (
            "m.chunk_id in"
            " (select memory_id from session_memories where session_id = :mem_session)",
            "mem_session",
            session_id,
        ),
    ]
    for condition, name, value in given:
        if value is not None:
            filters.append(condition)
            params[name] = value
    return Profile(
        kind="memory",
        join="join memories m on m.chunk_id = c.id",
        filters=" and ".join(filters),
        filter_table=("memories m", "m.chunk_id"),  # the filters read m alone
        # not deleted, not superseded: most memories; what the given filters keep, no one knows
        filters_keep_most=all(value is None for _, _, value in given),
        relevance=RELEVANCE,
        columns=COLUMNS,
        late=SHOWN,
        params=params,
    )
