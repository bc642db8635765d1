"""hybridsql: hybrid keyword + vector search inside SQLite, for agent memory.

The public names, importable from here (``from hybridsql import HybridIndex, SearchOptions``);
docs/api.md describes each. The package is laid out by concern, in layers (db/ at the bottom, the
command line on top): docs/architecture.md maps every folder and file, and pyproject.toml's
[tool.importlinter] says which layer may import which.
"""

import sys  # the interpreter's own: nothing to load

# The one place the version is written: pyproject.toml reads it (dynamic), setup.py passes it to
# the C build (-DHYBRIDSQL_VERSION), scripts/platforms.py to zig, and the CLI, the MCP servers and
# the Python hybridsql_version() import it (tests/test_version.py checks they all agree).
__version__ = "0.1.0"

# What type checkers and editors see; at run time each name comes from __getattr__ below. Not
# typing.TYPE_CHECKING: importing typing took half of a new process's first connect.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from hybridsql.db.extension import backend_of, connect, load, loadable_path
    from hybridsql.errors import (
        DamagedCopyError,
        DatabaseError,
        EmbeddingError,
        ExtensionError,
        HybridSQLError,
        IndexingError,
        ModelMismatchError,
        NotFoundError,
        ProjectError,
        QueryError,
        ReplicationError,
        VectorError,
    )
    from hybridsql.indexing.index import HybridIndex, IndexReport
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
        "ModelMismatchError",
        "NotFoundError",
        "ProjectError",
        "QueryError",
        "ReplicationError",
        "VectorError",
    ),
    "hybridsql.db.extension": ("backend_of", "connect", "load", "loadable_path"),
    "hybridsql.indexing.index": ("HybridIndex", "IndexReport"),
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
    "ModelMismatchError",
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


# The modules that docs, the README and installed entry points named before the package was laid
# out by concern, each importable by its old path as the very module of its new home (not a copy,
# nor a module that re-exports): `import hybridsql.index` gives hybridsql.indexing.index, so
# isinstance, pickles and monkeypatching see one module. tests/test_layers.py checks each.
_MOVED = {
    "hybridsql.chunking": "hybridsql.files.chunking",
    "hybridsql.datasette_plugin": "hybridsql.integrations.datasette",
    "hybridsql.embed": "hybridsql.embedding.embedder",
    "hybridsql.extension": "hybridsql.db.extension",
    "hybridsql.index": "hybridsql.indexing.index",
    "hybridsql.langchain": "hybridsql.integrations.langchain",
    "hybridsql.llamaindex": "hybridsql.integrations.llamaindex",
    "hybridsql.local_model": "hybridsql.embedding.local_model",
    "hybridsql.plugin": "hybridsql.integrations.sqlite_utils",
    "hybridsql.providers": "hybridsql.embedding.providers",
    "hybridsql.replication": "hybridsql.db.replication",
}


class _Moved:
    """The import system's finder and loader of the old paths in _MOVED (one table, no module
    left behind for each): the module of the new home, imported then, is the old path's too."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        # A loader by its two methods: importlib.abc.Loader, which the stubs name, would be one
        # more import for every `import hybridsql`.
        return ModuleSpec(name, cls)  # type: ignore[arg-type]

    @staticmethod
    def create_module(spec):
        import importlib

        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    @staticmethod
    def exec_module(module):
        # The import system gave the module the old path's spec; its own goes back, so that
        # importlib.reload and pickle find it where it lives.
        module.__spec__ = module.__spec__.loader_state


sys.meta_path.append(_Moved)
