"""hybridsql: hybrid keyword + vector search inside SQLite, for agent memory."""

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
from hybridsql.memory import (
    ExtractedEntry,
    Memory,
    MemoryHit,
    MemoryStore,
    Ranking,
    Session,
    SessionContext,
    TimelineEntry,
)

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
