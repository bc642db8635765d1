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
    Memory,
    MemoryHit,
    StoreState,
    _check_count,
    transaction,
)
from hybridsql.options import option
from hybridsql.search import MODES, SearchResults, clean_text, document_profile, finite


@dataclass
class MemorySearch:
    """What a memory search can be told: MemoryStore.search's keyword arguments and, derived
    from these fields (see hybridsql.options), the flags of ``hybridsql memory search`` and
    the parameters of the MCP tool search_memory."""

    project: str | None = option(None, "only this project's memories")
    sector: str | None = option(None, "only memories of this sector", choices=SECTORS)
    tier: str | None = option(None, "only memories of this tier: session, project or global")
    limit: int = option(10, "how many memories", short="-n")
    min_salience: float = option(0.0, "only memories at least this salient, in [0, 1]")
    include_superseded: bool = option(
        False, "also memories a newer one superseded (each says which)"
    )
    session_id: int | None = option(None, "only memories this session used", flag="--session")
    mode: str = option(
        "hybrid", "keyword (FTS5 bm25), semantic (vectors) or both fused", choices=MODES
    )
    recalled_in: int | None = option(
        None, "the session the memories found are linked to as recalled (default: session_id)"
    )
    reinforce: bool = option(
        True,
        "each memory found gains a little salience and is linked to the session as recalled, "
        "so it ranks higher next time; --no-reinforce (reinforce=false) only looks",
    )

    def check(self) -> None:
        """Raises QueryError for a value no memory search can use."""
        if self.sector is not None and self.sector not in SECTORS:
            raise QueryError(f"sector must be one of {', '.join(SECTORS)}, not {self.sector!r}")
        if self.mode not in MODES:
            raise QueryError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
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

        Each memory returned gains ``ranking.recall_boost`` salience and is linked as recalled
        to ``recalled_in`` (by default ``session_id``), so what was found before ranks higher in
        later searches. ``reinforce=False`` only looks: no salience, link or usage row is
        written (for evaluation, and for clients that only show memories), and nothing is on
        an index opened read-only (its notes say so). The results are MemoryHits.
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
            self._recall(hits, o.session_id if o.recalled_in is None else o.recalled_in, now)
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

    def _recall(self, hits, session_id, now) -> None:
        """Each memory returned gains salience, and is linked to the session as recalled."""
        if not hits:
            return
        boost = self.ranking.recall_boost
        with transaction(self.conn):
            for hit in hits:
                self.conn.execute(
                    "update memories set salience = min(1.0, salience + ?) where chunk_id = ?",
                    (boost, hit.memory.id),
                )
                self._link(session_id, hit.memory.id, "recalled", now)
                hit.memory.salience = min(1.0, hit.memory.salience + boost)


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
