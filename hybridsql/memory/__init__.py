"""An agent's memories, its sessions and their links, searched by the one hybrid statement.

A memory's content is a ``chunks`` row (kind 'memory', path '', so temporal_decay() leaves it
alone) with its vector and FTS entries; the table ``memories``, keyed by that chunk id, holds the
rest. A memory search is :meth:`Searcher.search` with the Profile of :func:`memory_profile`: its
filters run inside both candidate lists, before their top-k, and its relevance is the ranking
below, computed in the same statement:

    relevance = clamp[0, 1]((0.4 semantic + 0.25 keyword + 0.2 salience + 0.15 recency)
                            * sector boost * (0.5 if superseded else 1))
    recency   = exp(-0.05 * days since created)
    semantic, keyword: each side's score by the search's fusion (linear: the cosine over the
                       floor and bm25 over the best; rrf: 61 / (60 + rank), 1.0 for the first)
    salience  = min(1, own salience + min(0.1, 0.02 * sum over the sessions that recalled it
                                               of 2^-(days since that session's last recall / 7)))

A memory's own salience is what add, reinforce and supersede set; what recalls add comes from
the ``recalled`` rows of ``session_memories`` (once per session, relaxing, capped: see
MemoryStore.search).

Every number is a field of :class:`Ranking`. Documents (the memory folder's files) are searched
by the same statement with a filter on ``kind``.

The package by concern (each module's docstring says what it owns): ``records`` (constants,
dataclasses, checks), ``ranking`` (Ranking, memory_profile), and MemoryStore in ``store``, made of
one mixin per concern: ``writes``, ``sessions``, ``timeline``, ``recall`` (memory search) and
``folder`` (the memory folder), which share only ``state`` (StoreState). This module only
re-exports: ``from hybridsql.memory import ...`` names what it always did.
"""

# What type checkers and editors see; at run time each name is imported on its first use (PEP
# 562, as hybridsql's own face does), so that importing one module of the package (the command
# line's options, a constant) does not import all of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from hybridsql.memory.ranking import (
        COLUMNS,
        RANKING_NUMBERS,
        RELEVANCE,
        SHOWN,
        Ranking,
        memory_profile,
    )
    from hybridsql.memory.recall import MemorySearch
    from hybridsql.memory.records import (
        DAY,
        MAX_MEMORY_CHARS,
        MAX_NAME_CHARS,
        MAX_TAGS,
        PREVIEW_CHARS,
        READ_ONLY_NOTE,
        RELATED_TO,
        SECTORS,
        SUPERSEDES,
        TIERS,
        ExtractedEntry,
        Memory,
        MemoryHit,
        Session,
        SessionContext,
        TimelineEntry,
        transaction,
    )
    from hybridsql.memory.store import MemoryStore

_HOMES = {
    "hybridsql.memory.ranking": (
        "COLUMNS",
        "RANKING_NUMBERS",
        "RELEVANCE",
        "SHOWN",
        "Ranking",
        "memory_profile",
    ),
    "hybridsql.memory.recall": ("MemorySearch",),
    "hybridsql.memory.records": (
        "DAY",
        "MAX_MEMORY_CHARS",
        "MAX_NAME_CHARS",
        "MAX_TAGS",
        "PREVIEW_CHARS",
        "READ_ONLY_NOTE",
        "RELATED_TO",
        "SECTORS",
        "SUPERSEDES",
        "TIERS",
        "ExtractedEntry",
        "Memory",
        "MemoryHit",
        "Session",
        "SessionContext",
        "TimelineEntry",
        "transaction",
    ),
    "hybridsql.memory.store": ("MemoryStore",),
}
_HOME_OF = {name: home for home, names in _HOMES.items() for name in names}

__all__ = [
    "COLUMNS",
    "DAY",
    "MAX_MEMORY_CHARS",
    "MAX_NAME_CHARS",
    "MAX_TAGS",
    "PREVIEW_CHARS",
    "RANKING_NUMBERS",
    "READ_ONLY_NOTE",
    "RELATED_TO",
    "RELEVANCE",
    "SECTORS",
    "SHOWN",
    "SUPERSEDES",
    "TIERS",
    "ExtractedEntry",
    "Memory",
    "MemoryHit",
    "MemorySearch",
    "MemoryStore",
    "Ranking",
    "Session",
    "SessionContext",
    "TimelineEntry",
    "memory_profile",
    "transaction",
]


def __getattr__(name: str):
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'hybridsql.memory' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
