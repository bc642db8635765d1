"""An agent's memories, its sessions and their links, searched by the one hybrid statement.

A memory's content is a ``chunks`` row (kind 'memory', path '', so temporal_decay() leaves it
alone) with its vector and FTS entries; the table ``memories``, keyed by that chunk id, holds the
rest. A memory search is :meth:`Searcher.search` with the Profile of :func:`memory_profile`: its
filters run inside both candidate lists, before their top-k, and its relevance is the ranking
below, computed in the same statement:

    relevance = clamp[0, 1]((0.4 semantic + 0.25 keyword + 0.2 salience + 0.15 recency)
                            * sector boost * (0.5 if superseded else 1))
    recency   = exp(-0.05 * days since created)

Every number is a field of :class:`Ranking`. Documents (the memory folder's files) are searched
by the same statement with a filter on ``kind``.
"""

import errno
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime

from hybridsql.discovery import link_reason, open_inside
from hybridsql.errors import IndexingError, NotFoundError, QueryError
from hybridsql.options import option
from hybridsql.search import (
    MAX_RESULTS,
    MODES,
    Profile,
    SearchOptions,
    SearchResults,
    clean_text,
    document_profile,
    finite,
    whole,
)

SECTORS = ("episodic", "semantic", "procedural", "emotional", "reflective")
RELATED_TO = "RELATED_TO"
SUPERSEDES = "SUPERSEDES"
DAY = 86400.0
PREVIEW_CHARS = 200  # of a superseding memory's content, in superseded_by
READ_ONLY_NOTE = "the index is read-only here: the memories found were not reinforced"
# What one memory may hold, in characters: far more than a fact or an event needs (a long text
# belongs in a file of the memory folder), small enough that a search answer stays small.
MAX_MEMORY_CHARS = 100_000

_MEMORY_SQL = (
    "select m.chunk_id, m.project, c.text, m.sector, m.tier, m.salience, m.created_at,"
    " m.valid_until, m.deleted from memories m join chunks c on c.id = m.chunk_id"
)
_SESSION_SQL = "select id, project, started_at, ended_at, summary from sessions"
_SOURCE_SESSION = (
    "(select session_id from session_memories"
    " where memory_id = {id} and usage = 'created' order by at, rowid limit 1)"
)


def transaction(conn):
    """hybridsql.index.transaction, imported on first use: importing this module (as the
    command line does for its options) must not pull in apsw, numpy or the embedder."""
    from hybridsql.index import transaction as index_transaction

    return index_transaction(conn)


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


@dataclass
class Memory:
    """One memory: what the agent wrote, and how much it counts."""

    id: int
    project: str
    content: str
    sector: str
    tier: str
    salience: float
    created_at: float
    valid_until: float | None = None  # when it was superseded
    deleted: bool = False

    @property
    def is_superseded(self) -> bool:
        return self.valid_until is not None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Session:
    """One working session of an agent."""

    id: int
    project: str
    started_at: float
    ended_at: float | None
    summary: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class MemoryHit:
    """A memory found by search, with its score and its context."""

    memory: Memory
    score: float
    match_type: str  # 'semantic', 'keyword' or 'both'
    snippet: str  # the content around the query terms, which are in <mark>
    vector_score: float | None
    keyword_score: float | None
    source_session: int | None  # the session that created it
    is_superseded: bool
    superseded_by: dict | None  # {id, content (first 200 characters), created_at}
    related_count: int  # other memories linked to it, either way

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TimelineEntry:
    """A memory in a timeline: its place relative to the anchor (0), and its session."""

    offset: int
    memory: Memory
    session: Session | None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SessionContext:
    """The latest session that used a memory, how, and how many memories that session holds."""

    session: Session
    usage: str
    at: float
    memory_count: int

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ExtractedEntry:
    """A markdown entry appended to the memory folder, and the chunks that now index it."""

    path: str  # relative to the memory folder
    start_line: int
    end_line: int
    chunk_ids: list  # until the file changes again: re-indexing a file renumbers its chunks

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Ranking:
    """The numbers of the memory ranking; see the module docstring for the formula."""

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
    recall_boost: float = 0.02  # salience a memory gains each time a search returns it

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
        for name in ("superseded_factor", "recall_boost"):
            if not 0 <= getattr(self, name) <= 1:
                raise QueryError(f"ranking {name} must be in [0, 1], not {getattr(self, name)!r}")
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
)

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
    "salience": "m.salience",
    "valid_until": "m.valid_until",
    "memory_created_at": "m.created_at",
    "source_session": _SOURCE_SESSION.format(id="c.id"),
    "superseded_by": (
        f"(select json_object('id', n.chunk_id, 'content', substr(nc.text, 1, {PREVIEW_CHARS}),"
        " 'created_at', n.created_at) from memory_links l"
        " join memories n on n.chunk_id = l.from_id join chunks nc on nc.id = n.chunk_id"
        f" where l.to_id = c.id and l.relation = '{SUPERSEDES}' and n.deleted = 0"
        " order by n.created_at desc limit 1)"
    ),
    "related_count": (
        "(select count(*) from memories o where o.deleted = 0 and o.chunk_id in"
        " (select to_id from memory_links where from_id = c.id"
        " union select from_id from memory_links where to_id = c.id))"
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
        ("m.salience >= :mem_min_salience", "mem_min_salience", min_salience or None),
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
        relevance=RELEVANCE,
        columns=COLUMNS,
        params=params,
    )


def _max_memory_chars() -> int:
    """$HYBRIDSQL_MAX_MEMORY_CHARS, else MAX_MEMORY_CHARS."""
    text = os.environ.get("HYBRIDSQL_MAX_MEMORY_CHARS", "")
    if not text:
        return MAX_MEMORY_CHARS
    if not text.isdigit() or int(text) < 1:
        raise IndexingError(
            f"HYBRIDSQL_MAX_MEMORY_CHARS must be a whole number of characters, not {text!r}"
        )
    return int(text)


class MemoryStore:
    """An agent's memories and sessions in a HybridIndex, and the memory folder it writes to.

    ``options`` are the SearchOptions memory searches start from (backend, candidate pool,
    vector floor...); ``document_options`` those of document searches. ``clock`` gives the time
    in unix seconds. ``max_chars`` bounds what one memory (or one note extract_memory writes)
    may hold: default $HYBRIDSQL_MAX_MEMORY_CHARS, else MAX_MEMORY_CHARS.
    """

    def __init__(
        self,
        index: "HybridIndex",  # noqa: F821 (hybridsql.index, imported on first use)
        memory_dir: str | None = None,
        ranking: Ranking | None = None,
        options: SearchOptions | None = None,
        document_options: SearchOptions | None = None,
        clock=time.time,
        max_chars: int | None = None,
    ):
        self.max_chars = _max_memory_chars() if max_chars is None else max_chars
        self.index = index
        self.conn = index.conn
        self.memory_dir = memory_dir
        self.ranking = ranking or Ranking()
        self.ranking.check()
        self.options = options or SearchOptions(prefix=True, min_score=0.0)
        self.document_options = document_options or SearchOptions(prefix=True)
        self.clock = clock

    # -- sessions -------------------------------------------------------------------------------

    def _check_size(self, content: str) -> None:
        if len(content) > self.max_chars:
            raise IndexingError(
                f"a memory holds at most {self.max_chars:,} characters, this one has "
                f"{len(content):,}: store a summary, or write the text to a file in the memory "
                "folder (HYBRIDSQL_MAX_MEMORY_CHARS raises the bound)"
            )

    def start_session(self, project: str = "") -> Session:
        """Opens a session; memories it creates or uses are linked to it."""
        _check_text("project", project, empty=True)
        with transaction(self.conn):
            self.conn.execute(
                "insert into sessions(project, started_at) values (?, ?)", (project, self.clock())
            )
            session_id = self.conn.last_insert_rowid()
        return self.get_session(session_id)

    def end_session(self, session_id: int, summary: str = "") -> Session:
        """Closes a session, with a summary of what it did."""
        _check_text("summary", summary, empty=True)
        self.get_session(session_id)
        with transaction(self.conn):
            self.conn.execute(
                "update sessions set ended_at = ?, summary = ? where id = ?",
                (self.clock(), summary, session_id),
            )
        return self.get_session(session_id)

    def get_session(self, session_id: int) -> Session:
        _check_id("session", session_id)
        row = self.conn.execute(f"{_SESSION_SQL} where id = ?", (session_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no session with id {session_id}")
        return Session(*row)

    # -- writing memories -----------------------------------------------------------------------

    def add(
        self,
        content: str,
        project: str = "",
        sector: str = "semantic",
        tier: str = "project",
        salience: float = 0.5,
        session_id: int | None = None,
        created_at: float | None = None,
    ) -> Memory:
        """Stores a memory with its vector; links it to ``session_id`` as created."""
        _check_memory(content, project, sector, tier, salience)
        self._check_size(content)
        content, project, tier = clean_text(content), clean_text(project), clean_text(tier)
        if session_id is not None:
            self.get_session(session_id)
        vector = self._embed(content)
        now = self.clock() if created_at is None else created_at
        with transaction(self.conn):
            memory_id = self._insert(content, project, sector, tier, salience, now, vector)
            self._link(session_id, memory_id, "created", now)
        return self.get(memory_id)

    def supersede(
        self,
        memory_id: int,
        content: str,
        session_id: int | None = None,
        created_by: str = "agent",
        sector: str | None = None,
        tier: str | None = None,
        salience: float | None = None,
    ) -> Memory:
        """Replaces a memory with a new one that SUPERSEDES it; the old one gets valid_until.

        The new memory keeps the old one's project, and its sector, tier and salience unless
        given. In ``session_id`` the new memory is linked as created, the old one as updated.
        """
        old = self._live(memory_id)
        if old.is_superseded:
            newer = self.conn.execute(
                "select from_id from memory_links where to_id = ? and relation = ?",
                (memory_id, SUPERSEDES),
            ).fetchone()
            by = f" by memory {newer[0]}" if newer else ""
            raise IndexingError(f"memory {memory_id} is already superseded{by}")
        sector = old.sector if sector is None else sector
        tier = old.tier if tier is None else clean_text(tier)
        content = clean_text(content) if isinstance(content, str) else content
        salience = old.salience if salience is None else salience
        _check_memory(content, old.project, sector, tier, salience)
        self._check_size(content)
        _check_text("created_by", created_by, empty=True)
        if session_id is not None:
            self.get_session(session_id)
        vector = self._embed(content)
        now = self.clock()
        with transaction(self.conn):
            new_id = self._insert(content, old.project, sector, tier, salience, now, vector)
            self.conn.execute(
                "update memories set valid_until = ? where chunk_id = ?", (now, memory_id)
            )
            self.conn.execute(
                "insert into memory_links values (?, ?, ?, ?, ?)",
                (new_id, memory_id, SUPERSEDES, created_by, now),
            )
            self._link(session_id, new_id, "created", now)
            self._link(session_id, memory_id, "updated", now)
        return self.get(new_id)

    def reinforce(
        self, memory_id: int, amount: float = 0.1, session_id: int | None = None
    ) -> Memory:
        """Raises a memory's salience by ``amount`` (capped at 1); links it as reinforced."""
        self._live(memory_id)
        if not 0 < amount <= 1:
            raise IndexingError(f"amount must be in (0, 1], not {amount!r}")
        if session_id is not None:
            self.get_session(session_id)
        now = self.clock()
        with transaction(self.conn):
            self.conn.execute(
                "update memories set salience = min(1.0, salience + ?) where chunk_id = ?",
                (amount, memory_id),
            )
            self._link(session_id, memory_id, "reinforced", now)
        return self.get(memory_id)

    def relate(
        self,
        from_id: int,
        to_id: int,
        relation: str = RELATED_TO,
        created_by: str = "agent",
    ) -> None:
        """Records that memory ``from_id`` has ``relation`` to memory ``to_id``."""
        self._live(from_id)
        self._live(to_id)
        if from_id == to_id:
            raise IndexingError(f"memory {from_id} cannot be related to itself")
        if not re.fullmatch(r"[A-Z][A-Z_]*", relation):
            raise IndexingError(f"relation must be upper case, like RELATED_TO, not {relation!r}")
        _check_text("created_by", created_by, empty=True)
        with transaction(self.conn):
            self.conn.execute(
                "insert or ignore into memory_links values (?, ?, ?, ?, ?)",
                (from_id, to_id, relation, created_by, self.clock()),
            )

    def delete(self, memory_id: int, hard: bool = False) -> None:
        """Marks a memory deleted: no search or timeline shows it again.

        ``hard`` removes it from the database instead, with its vector, FTS entries and links,
        and its text's vectors in the embedding cache unless another chunk has the same text
        (that chunk's next re-index would embed it again for nothing, and the cache holds
        nothing that the chunk does not show already).
        """
        memory = self._live(memory_id)
        with transaction(self.conn):
            if hard:
                self.conn.execute("delete from chunks where id = ?", (memory_id,))
                self._forget_embedding(memory.content)
            else:
                self.conn.execute(
                    "update memories set deleted = 1 where chunk_id = ?", (memory_id,)
                )

    def get(self, memory_id: int) -> Memory:
        """The memory with this id, deleted or not."""
        _check_id("memory", memory_id)
        row = self.conn.execute(f"{_MEMORY_SQL} where m.chunk_id = ?", (memory_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no memory with id {memory_id}")
        return _memory(row)

    # -- reading memories -----------------------------------------------------------------------

    def search(self, query: str, **options) -> SearchResults:
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
        opts = replace(self.options, mode=o.mode, max_results=o.limit, now=now)
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
            max_results=limit,
            now=self.clock(),
            decay=decay,
            group_by_file=group_by_file,
        )
        return self.index.searcher.search(query, opts, document_profile(project))

    def timeline(self, anchor_id: int, before: int = 5, after: int = 5) -> list:
        """The anchor and the memories of its project just before and after it in time, oldest
        first, each with the session that created it (TimelineEntry, offset 0 for the anchor)."""
        _check_count("before", before, 0)
        _check_count("after", after, 0)
        anchor = self._live(anchor_id)
        sql = (
            f"{_MEMORY_SQL} where m.project = ? and m.deleted = 0"
            " and (m.created_at, m.chunk_id) {op} (?, ?)"
            " order by m.created_at {order}, m.chunk_id {order} limit ?"
        )
        key = (anchor.project, anchor.created_at, anchor.id)
        earlier = self.conn.execute(sql.format(op="<", order="desc"), (*key, before)).fetchall()
        later = self.conn.execute(sql.format(op=">", order="asc"), (*key, after)).fetchall()
        memories = [_memory(r) for r in reversed(earlier)] + [anchor]
        memories += [_memory(r) for r in later]
        return [
            TimelineEntry(offset, memory, self._source_session(memory.id))
            for offset, memory in enumerate(memories, -len(earlier))
        ]

    def recent(self, project: str, limit: int = 10, include_superseded: bool = False) -> list:
        """The latest memories of ``project``, newest first, each with the session that created
        it (TimelineEntry, offset 0 the newest, -1 the one before); reads, reinforces nothing."""
        _check_count("limit", limit, 1)
        _check_text("project", project, empty=True)
        kept = "" if include_superseded else " and m.valid_until is null"
        rows = self.conn.execute(
            f"{_MEMORY_SQL} where m.project = ? and m.deleted = 0{kept}"
            " order by m.created_at desc, m.chunk_id desc limit ?",
            (clean_text(project), limit),
        ).fetchall()
        memories = [_memory(r) for r in rows]
        return [
            TimelineEntry(-n, memory, self._source_session(memory.id))
            for n, memory in enumerate(memories)
        ]

    def session_context(self, memory_id: int) -> SessionContext | None:
        """The latest session link of a memory, or None when no session has used it."""
        self._live(memory_id)
        row = self.conn.execute(
            "select session_id, usage, at from session_memories where memory_id = ?"
            " order by at desc, rowid desc limit 1",
            (memory_id,),
        ).fetchone()
        if row is None:
            return None
        count = self.conn.execute(
            "select count(distinct l.memory_id) from session_memories l"
            " join memories m on m.chunk_id = l.memory_id where l.session_id = ? and m.deleted = 0",
            (row[0],),
        ).fetchone()[0]
        return SessionContext(self.get_session(row[0]), row[1], row[2], count)

    # -- the memory folder ------------------------------------------------------------------------

    def extract_memory(
        self, topic: str, title: str, content: str, tags: list | None = None
    ) -> ExtractedEntry:
        """Appends an entry to today's ``memory/YYYY-MM-DD.md`` and indexes it at once.

        The entry is a ``## title`` section, then ``- topic:``, ``- tags:`` and ``- time:``
        lines, a blank line and the content; headings in the content move down to ``###`` so
        the entry stays one section.
        """
        if self.memory_dir is None:
            raise IndexingError("no memory folder is configured (memory_dir)")
        title, topic = _one_line("title", title), _one_line("topic", topic)
        _check_text("content", content)
        self._check_size(content)
        content = clean_text(content)
        tags = [_one_line("tag", t) for t in tags or []]
        if any("," in t for t in tags):
            raise IndexingError(f"a tag cannot contain a comma: {tags!r}")
        stamp = datetime.fromtimestamp(self.clock())
        rel = f"memory/{stamp:%Y-%m-%d}.md"
        body = re.sub(r"(?m)^ {0,3}#{1,2}(?=[ \t]|$)", "###", content.strip())
        lines = [f"## {title}", f"- topic: {topic}"]
        lines += [f"- tags: {', '.join(tags)}"] if tags else []
        lines += [f"- time: {stamp:%H:%M}", "", *body.splitlines()]
        try:
            with open(self._note_fd(rel), "r+b") as f:
                existing = f.read().decode("utf-8", errors="replace")
                if not existing.strip():
                    before = f"# {stamp:%Y-%m-%d}\n\n"
                else:  # one blank line between entries
                    trailing = len(existing) - len(existing.rstrip("\n"))
                    before = "\n" * max(0, 2 - trailing)
                start = (existing + before).count("\n") + 1
                f.write((before + "\n".join(lines) + "\n").encode("utf-8"))
        except OSError as e:
            why = link_reason(self.memory_dir, e) or e.strerror
            raise IndexingError(
                f"cannot write {rel} in the memory folder {self.memory_dir}: {why}"
            ) from e
        self.index.index_folder(self.memory_dir)
        end = start + len(lines) - 1
        chunk_ids = [
            r[0]
            for r in self.conn.execute(
                "select c.id from chunks c join files f on f.id = c.file_id"
                " where f.root = ? and f.path = ? and c.end_line >= ? and c.start_line <= ?"
                " order by c.start_line",
                (os.path.abspath(self.memory_dir), rel, start, end),
            )
        ]
        return ExtractedEntry(rel, start, end, chunk_ids)

    def _note_fd(self, rel: str) -> int:
        """The note ``rel`` in the memory folder, opened to read and append, made with its
        folders if missing. Nothing on the way may be a symbolic link, and the note must be a
        regular file (OSError otherwise), so that writes stay inside the memory folder."""
        os.makedirs(self.memory_dir, exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
        fd = open_inside(self.memory_dir, rel, flags, make_dirs=True)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        return fd

    # -- helpers ----------------------------------------------------------------------------------

    def _live(self, memory_id: int) -> Memory:
        memory = self.get(memory_id)
        if memory.deleted:
            raise NotFoundError(f"memory {memory_id} is deleted")
        return memory

    def _embed(self, content: str):
        embedder = self.index.embedder
        return None if embedder is None else embedder.embed([content])[0]

    def _insert(self, content, project, sector, tier, salience, created_at, vector) -> int:
        conn = self.conn
        conn.execute(
            "insert into chunks(kind, file_id, path, text, created_at)"
            " values ('memory', null, '', ?, ?)",
            (content, created_at),
        )
        memory_id = conn.last_insert_rowid()
        conn.execute(
            "insert into memories(chunk_id, project, sector, tier, salience, created_at)"
            " values (?, ?, ?, ?, ?, ?)",
            (memory_id, project, sector, tier, salience, created_at),
        )
        if vector is not None:
            conn.execute(
                "insert into vectors(chunk_id, vector, model_id, kind) values (?, ?, ?, 'memory')",
                (memory_id, vector.astype("<f4").tobytes(), self.index.embedder.model_id),
            )
        return memory_id

    def _link(self, session_id, memory_id, usage, at) -> None:
        if session_id is not None:
            self.conn.execute(
                "insert into session_memories(session_id, memory_id, usage, at)"
                " values (?, ?, ?, ?)",
                (session_id, memory_id, usage, at),
            )

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

    def _forget_embedding(self, text: str) -> None:
        """Drops every model's cached vector of ``text``, unless a chunk still has that text."""
        used = "select exists(select 1 from chunks where text = ?)"
        if self.conn.execute(used, (text,)).fetchone()[0]:
            return
        cache = "select count(*) from sqlite_schema where name = 'embedding_cache'"
        if self.conn.execute(cache).fetchone()[0]:
            key = hashlib.sha256(text.encode("utf-8")).digest()
            self.conn.execute("delete from embedding_cache where text_sha256 = ?", (key,))
        if self.index.embedder is not None:
            self.index.embedder.forget(text)

    def _source_session(self, memory_id: int) -> Session | None:
        row = self.conn.execute(
            f"{_SESSION_SQL} where id = {_SOURCE_SESSION.format(id='?')}", (memory_id,)
        ).fetchone()
        return Session(*row) if row else None


def _memory(row) -> Memory:
    memory_id, project, content, sector, tier, salience, created_at, valid_until, deleted = row
    return Memory(
        memory_id, project, content, sector, tier, salience, created_at, valid_until, bool(deleted)
    )


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


def _check_id(kind: str, value) -> None:
    """An id is an integer; one beyond SQLite's 64 bits names nothing."""
    if not whole(value):
        raise QueryError(f"a {kind} id must be an integer, not {value!r}")
    if not -(2**63) <= value < 2**63:
        raise NotFoundError(f"no {kind} with id {value}")


def _check_count(name: str, value, low: int) -> None:
    """Counts (results, neighbours) have the one limit every search has."""
    if not whole(value) or not low <= value <= MAX_RESULTS:
        raise QueryError(f"{name} must be an integer from {low} to {MAX_RESULTS}, not {value!r}")


def _check_text(name: str, value, empty: bool = False) -> None:
    if not isinstance(value, str):
        raise IndexingError(f"{name} must be text, not {type(value).__name__}")
    if not empty and not value.strip():
        raise IndexingError(f"{name} is empty")


def _one_line(name: str, value) -> str:
    _check_text(name, value)
    return clean_text(" ".join(value.split()))


def _check_memory(content, project, sector, tier, salience) -> None:
    _check_text("content", content)
    _check_text("project", project, empty=True)
    _check_text("tier", tier)
    if sector not in SECTORS:
        raise IndexingError(f"sector must be one of {', '.join(SECTORS)}, not {sector!r}")
    if isinstance(salience, bool) or not isinstance(salience, (int, float)):
        raise IndexingError(f"salience must be a number, not {type(salience).__name__}")
    if not 0 <= salience <= 1:
        raise IndexingError(f"salience must be in [0, 1], not {salience!r}")
