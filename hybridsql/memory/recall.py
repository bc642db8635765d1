"""Memory search: MemorySearch (what a search can be told), the search of memories and of the
memory folder's documents through the one statement, and the salience a memory found gains."""

import json
from dataclasses import dataclass, replace
from typing import Any

from hybridsql.errors import QueryError
from hybridsql.memory.ranking import memory_profile
from hybridsql.memory.records import (
    READ_ONLY_NOTE,
    SECTORS,
    TIERS,
    Memory,
    MemoryHit,
    _check_count,
    _check_name,
    _check_tier,
    transaction,
)
from hybridsql.memory.state import StoreState
from hybridsql.options import option
from hybridsql.search import MODES, SearchResults, clean_text, document_profile, finite


@dataclass
class MemorySearch:
    """What a memory search can be told: MemoryStore.search's keyword arguments and, derived
    from these fields (see hybridsql.options), the flags of ``hybridsql memory search`` and
    the parameters of the MCP tool search_memory."""

    project: str | None = option(None, "only this project's memories")
    sector: str | None = option(None, "only memories of this sector", choices=SECTORS)
    tier: str | None = option(None, "only memories of this tier", choices=TIERS)
    limit: int = option(10, "how many memories", short="-n")
    min_salience: float = option(0.0, "only memories at least this salient, in [0, 1]")
    include_superseded: bool = option(
        False, "also memories a newer one superseded (each says which)"
    )
    session_id: int | None = option(None, "only memories this session used", aliases=["--session"])
    mode: str = option(
        "hybrid", "keyword (FTS5 bm25), semantic (vectors) or both fused", choices=MODES
    )
    recalled_in: int | None = option(
        None, "the session the memories found are linked to as recalled (default: session_id)"
    )
    reinforce: bool = option(
        True,
        "each memory found is linked to the session as recalled and gains a little salience, "
        "once per session, relaxing over days; --no-reinforce (reinforce=false) only looks",
    )

    def check(self) -> None:
        """Raises QueryError for a value no memory search can use."""
        if self.sector is not None and self.sector not in SECTORS:
            raise QueryError(f"sector must be one of {', '.join(SECTORS)}, not {self.sector!r}")
        if self.mode not in MODES:
            raise QueryError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.tier is not None:
            _check_tier(self.tier, QueryError)
        if isinstance(self.project, str):
            _check_name("project", self.project, empty=True, error=QueryError)
        self.project, self.tier = (
            clean_text(v) if isinstance(v, str) else v for v in (self.project, self.tier)
        )
        _check_count("limit", self.limit, 1)
        if not finite(self.min_salience) or not 0 <= self.min_salience <= 1:
            raise QueryError(f"min_salience must be in [0, 1], not {self.min_salience!r}")


class Recall(StoreState):
    """MemoryStore's searches (a mixin: ``index``, ``ranking``, ``options``, ``document_options``
    and ``clock`` are the store's; sessions are checked and linked by Sessions)."""

    def search(self, query: str, **options: Any) -> SearchResults:
        """Ranked memories; ``options`` are the fields of MemorySearch. The filters apply before
        the top-k, so ``limit`` results come back whenever that many match.

        Each memory returned is linked as recalled to ``recalled_in`` (by default
        ``session_id``; with neither, to the store's own session, opened by its first such
        search), and so gains salience: ``ranking.recall_boost`` for each session that recalled
        it, counted once however often that session does, each gain halving every
        ``ranking.recall_half_life_days`` after the session's last recall, all of them together
        at most ``ranking.recall_cap`` (Ranking.recall_gain). What was found before ranks a
        little higher later, and never by more than the cap. ``reinforce=False`` only looks: no
        link or usage row is written (for evaluation, and for clients that only show memories),
        and nothing is on an index opened read-only (its notes say so). The results are
        MemoryHits, whose salience counts this search's recall.
        """
        o = MemorySearch(**options)
        o.check()
        for session in (o.session_id, o.recalled_in):
            if session is not None:
                self.get_session(session)
        profile = memory_profile(
            self.ranking,
            o.project,
            o.sector,
            o.tier,
            o.min_salience,
            o.include_superseded,
            o.session_id,
        )
        now = self.clock()
        opts = replace(self.options, mode=o.mode, limit=o.limit, now=now)
        found = self.index.searcher.search(query, opts, profile)
        hits = [_hit(r) for r in found]
        if o.reinforce and self.index.readonly:
            found.notes.append(READ_ONLY_NOTE)
        elif o.reinforce:
            session = o.session_id if o.recalled_in is None else o.recalled_in
            own = {r.id: r.extra["own_salience"] for r in found}
            self._recall(hits, own, session, now)
        found.results = hits
        return found

    def search_documents(
        self,
        query: str,
        project: str | None = None,
        limit: int = 10,
        decay: bool = True,
        group_by_file: bool = False,
    ) -> SearchResults:
        """Ranked chunks of the indexed memory files (documents), ``project``'s only if given;
        ``decay`` and ``group_by_file`` as in SearchOptions."""
        _check_count("limit", limit, 1)
        project = clean_text(project) if isinstance(project, str) else project
        opts = replace(
            self.document_options,
            limit=limit,
            now=self.clock(),
            decay=decay,
            group_by_file=group_by_file,
        )
        return self.index.searcher.search(query, opts, document_profile(project))

    def _recall(self, hits, own, session_id, now) -> None:
        """Links each memory returned to the session (the store's own if None) as recalled,
        and sets the hit's salience to its own (``own``, by id) and its recalls' gain."""
        if not hits:
            return
        if session_id is None:
            session_id = self._own_session()
        with transaction(self.conn):
            for hit in hits:
                self._link(session_id, hit.memory.id, "recalled", now)
        gains = self._recall_gains([hit.memory.id for hit in hits], now)
        for hit in hits:
            hit.memory.salience = min(1.0, own[hit.memory.id] + gains.get(hit.memory.id, 0.0))

    def _own_session(self) -> int:
        """The session that searches naming none recall into, opened on first use."""
        if getattr(self, "_own_session_id", None) is None:
            self._own_session_id = self.start_session().id
        return self._own_session_id

    def _recall_gains(self, memory_ids, now) -> dict:
        """The salience their recalls add, by memory id (none for one never recalled)."""
        recalled: dict = {}
        for memory_id, at in self.conn.execute(
            "select memory_id, max(at) from session_memories where usage = 'recalled'"
            " and memory_id in (select value from json_each(?)) group by memory_id, session_id",
            (json.dumps(list(memory_ids)),),
        ):
            recalled.setdefault(memory_id, []).append(at)
        return {i: self.ranking.recall_gain(ats, now) for i, ats in recalled.items()}

    def _recalled(self, memories) -> list:
        """``memories`` (read with their own salience), each with its recalls' gain added."""
        gains = self._recall_gains([m.id for m in memories], self.clock())
        for m in memories:
            if m.id in gains:
                m.salience = min(1.0, m.salience + gains[m.id])
        return memories


def _hit(result) -> MemoryHit:
    x = result.extra
    memory = Memory(
        id=result.id,
        project=x["project"],
        content=result.text,
        sector=x["sector"],
        tier=x["tier"],
        salience=x["salience"],
        created_at=x["memory_created_at"],
        valid_until=x["valid_until"],
    )
    return MemoryHit(
        memory=memory,
        score=result.score,
        match_type=result.match_type,
        snippet=result.snippet,
        vector_score=result.vector_score,
        keyword_score=result.keyword_score,
        source_session=x["source_session"],
        is_superseded=x["valid_until"] is not None,
        superseded_by=json.loads(x["superseded_by"]) if x["superseded_by"] else None,
        related_count=x["related_count"],
    )
