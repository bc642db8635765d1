"""hybridsql: hybrid keyword + vector search inside SQLite, for agent memory."""

from hybridsql.errors import (
    EmbeddingError,
    ExtensionError,
    HybridSQLError,
    IndexingError,
    NotFoundError,
    QueryError,
    VectorError,
)
from hybridsql.extension import backend_of, connect, load, loadable_path

__version__ = "0.1.0"

__all__ = [
    "EmbeddingError",
    "ExtensionError",
    "HybridSQLError",
    "IndexingError",
    "NotFoundError",
    "QueryError",
    "VectorError",
    "backend_of",
    "connect",
    "load",
    "loadable_path",
]
