"""What the memory store holds and returns: the constants, the dataclasses (Memory, Session,
MemoryHit, TimelineEntry, SessionContext, ExtractedEntry), the SQL that reads a memory or a
session, and the checks of the values a caller gives."""

import os
from dataclasses import asdict, dataclass

from hybridsql.errors import IndexingError, NotFoundError, QueryError
from hybridsql.search import MAX_RESULTS, clean_text, whole

SECTORS = ("episodic", "semantic", "procedural", "emotional", "reflective")
TIERS = ("session", "project", "global")
RELATED_TO = "RELATED_TO"
SUPERSEDES = "SUPERSEDES"
DAY = 86400.0
PREVIEW_CHARS = 200  # of a superseding memory's content, in superseded_by
READ_ONLY_NOTE = "the index is read-only here: the memories found were not reinforced"
# What one memory may hold, in characters: far more than a fact or an event needs (a long text
# belongs in a file of the memory folder), small enough that a search answer stays small.
MAX_MEMORY_CHARS = 100_000
# What a name may hold, in characters: a project, and an extracted note's title, topic and each
# of its tags. A title becomes a heading that every chunk under it names, and a tool's argument
# is read whole before anything can refuse it, so every text a caller gives has a bound.
MAX_NAME_CHARS = 200
MAX_TAGS = 20  # tags of one extracted note

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
    """hybridsql.db.extension.transaction, imported on first use: importing this module (as the
    command line does for its options) must not pull in apsw, numpy or the embedder."""
    from hybridsql.db.extension import transaction as db_transaction

    return db_transaction(conn)


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
        # asdict()'s answer without its deep copy of each number and string (a search answers
        # a dozen of these): every field is one of those
        return dict(self.__dict__)


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
        # asdict()'s answer, its containers copied, the numbers and strings shared
        out = dict(self.__dict__)
        out["memory"] = self.memory.as_dict()
        if self.superseded_by is not None:
            out["superseded_by"] = dict(self.superseded_by)
        return out


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


def _memory(row) -> Memory:
    memory_id, project, content, sector, tier, salience, created_at, valid_until, deleted = row
    return Memory(
        memory_id, project, content, sector, tier, salience, created_at, valid_until, bool(deleted)
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


def _shown(value, most: int = 80) -> str:
    """``value``'s repr, cut to about ``most`` characters: an error line quotes what it refuses,
    and what it refuses may be megabytes."""
    if isinstance(value, list):
        return f"a list of {len(value)}"
    text = repr(value)
    return text if len(text) <= most else text[: most - 1] + "…"


def _check_name(name: str, value, empty: bool = False, error=IndexingError) -> None:
    """A name is text of at most MAX_NAME_CHARS characters."""
    _check_text(name, value, empty)
    if len(value) > MAX_NAME_CHARS:
        raise error(f"{name} must be at most {MAX_NAME_CHARS} characters, not {len(value):,}")


def _one_line(name: str, value) -> str:
    _check_name(name, value)
    return clean_text(" ".join(value.split()))


def _check_tier(tier, error=IndexingError) -> None:
    if tier not in TIERS:
        raise error(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")


def _check_memory(content, sector, salience) -> None:
    _check_text("content", content)
    if sector not in SECTORS:
        raise IndexingError(f"sector must be one of {', '.join(SECTORS)}, not {sector!r}")
    if isinstance(salience, bool) or not isinstance(salience, (int, float)):
        raise IndexingError(f"salience must be a number, not {type(salience).__name__}")
    if not 0 <= salience <= 1:
        raise IndexingError(f"salience must be in [0, 1], not {salience!r}")
