"""hybridsql: hybrid keyword + vector search inside SQLite, for agent memory."""

# Each public name is imported on first use (PEP 562), so that ``import hybridsql`` (and
# ``hybridsql --version``) loads neither apsw, numpy nor the embedder.
_HOMES = {
    **dict.fromkeys(
        (
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
        "hybridsql.errors",
    ),
    **dict.fromkeys(("backend_of", "connect", "load", "loadable_path"), "hybridsql.extension"),
    **dict.fromkeys(
        (
            "ExtractedEntry",
            "Memory",
            "MemoryHit",
            "MemoryStore",
            "Ranking",
            "Session",
            "SessionContext",
            "TimelineEntry",
        ),
        "hybridsql.memory",
    ),
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'hybridsql' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


# The one place the version is written: pyproject.toml reads it (dynamic), setup.py passes it to
# the C build (-DHYBRIDSQL_VERSION), scripts/platforms.py to zig, and the CLI, the MCP servers and
# the Python hybridsql_version() import it (tests/test_version.py checks they all agree).
__version__ = "0.1.0"

__all__ = [
    "DamagedCopyError",
    "DatabaseError",
    "EmbeddingError",
    "ExtensionError",
    "ExtractedEntry",
    "HybridSQLError",
    "IndexingError",
    "Memory",
    "MemoryHit",
    "MemoryStore",
    "NotFoundError",
    "ProjectError",
    "QueryError",
    "Ranking",
    "ReplicationError",
    "Session",
    "SessionContext",
    "TimelineEntry",
    "VectorError",
    "backend_of",
    "connect",
    "load",
    "loadable_path",
]
