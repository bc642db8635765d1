"""hybridsql: hybrid keyword + vector search inside SQLite, for agent memory.

The public names, importable from here (``from hybridsql import HybridIndex, SearchOptions``);
docs/api.md describes each.
"""

# The one place the version is written: pyproject.toml reads it (dynamic), setup.py passes it to
# the C build (-DHYBRIDSQL_VERSION), scripts/platforms.py to zig, and the CLI, the MCP servers and
# the Python hybridsql_version() import it (tests/test_version.py checks they all agree).
__version__ = "0.1.0"

# What type checkers and editors see; at run time each name comes from __getattr__ below. Not
# typing.TYPE_CHECKING: importing typing took half of a new process's first connect.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from hybridsql.errors import (
        DamagedCopyError,
        DatabaseError,
        EmbeddingError,
        ExtensionError,
        HybridSQLError,
        IndexingError,
        NotFoundError,
        ProjectError,
        QueryError,
        ReplicationError,
        VectorError,
    )
    from hybridsql.extension import backend_of, connect, load, loadable_path
    from hybridsql.index import HybridIndex, IndexReport
    from hybridsql.memory import (
        ExtractedEntry,
        Memory,
        MemoryHit,
        MemorySearch,
        MemoryStore,
        Ranking,
        Session,
        SessionContext,
        TimelineEntry,
    )
    from hybridsql.search import SearchOptions, SearchResult, SearchResults

# Each public name and the module it lives in. A name is imported on first use (PEP 562), so
# that ``import hybridsql`` (and ``hybridsql --version``) loads neither apsw, numpy nor the
# embedder.
_HOMES = {
    "hybridsql.errors": (
        "DamagedCopyError",
        "DatabaseError",
        "EmbeddingError",
        "ExtensionError",
        "HybridSQLError",
        "IndexingError",
        "NotFoundError",
        "ProjectError",
        "QueryError",
        "ReplicationError",
        "VectorError",
    ),
    "hybridsql.extension": ("backend_of", "connect", "load", "loadable_path"),
    "hybridsql.index": ("HybridIndex", "IndexReport"),
    "hybridsql.search": ("SearchOptions", "SearchResult", "SearchResults"),
    "hybridsql.memory": (
        "ExtractedEntry",
        "Memory",
        "MemoryHit",
        "MemorySearch",
        "MemoryStore",
        "Ranking",
        "Session",
        "SessionContext",
        "TimelineEntry",
    ),
}
_HOME_OF = {name: home for home, names in _HOMES.items() for name in names}

# The same names as _HOMES and the imports above (tests/test_api.py checks the three agree).
__all__ = [
    "DamagedCopyError",
    "DatabaseError",
    "EmbeddingError",
    "ExtensionError",
    "ExtractedEntry",
    "HybridIndex",
    "HybridSQLError",
    "IndexReport",
    "IndexingError",
    "Memory",
    "MemoryHit",
    "MemorySearch",
    "MemoryStore",
    "NotFoundError",
    "ProjectError",
    "QueryError",
    "Ranking",
    "ReplicationError",
    "SearchOptions",
    "SearchResult",
    "SearchResults",
    "Session",
    "SessionContext",
    "TimelineEntry",
    "VectorError",
    "backend_of",
    "connect",
    "load",
    "loadable_path",
]


def __getattr__(name: str):
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'hybridsql' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
