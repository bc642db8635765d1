"""The errors hybridsql raises: one base class, one small subclass per kind of failure."""


class HybridSQLError(Exception):
    """Base class of every error hybridsql raises on purpose."""


class DatabaseError(HybridSQLError):
    """The database cannot be used: missing, not a hybridsql index, damaged, read-only, full."""


class ExtensionError(HybridSQLError):
    """The native SQLite extension could not be found or loaded."""


class VectorError(HybridSQLError, ValueError):
    """A vector is malformed: bad length, bad JSON, NaN or infinity, wrong dimensions."""


class EmbeddingError(HybridSQLError):
    """An embedding provider is misconfigured or failed to answer."""


class ModelMismatchError(EmbeddingError):
    """An index is used with another model than the one that made its vectors."""


class IndexingError(HybridSQLError):
    """A file or memory could not be indexed."""


class QueryError(HybridSQLError, ValueError):
    """A search was asked with invalid parameters."""


class ProjectError(HybridSQLError, ValueError):
    """A project name cannot name an index file: empty, too long, or with a path in it."""


class NotFoundError(HybridSQLError, KeyError):
    """A memory, session or document that was asked for does not exist."""

    def __str__(self):  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


class ReplicationError(HybridSQLError):
    """Litestream is missing or failed, or a restore was refused or did not verify."""


class DamagedCopyError(ReplicationError):
    """A copy restored from a replica does not open or fails an integrity check."""
