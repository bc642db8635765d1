"""Hybrid search: one SQL statement fuses FTS5 bm25 with vector scores, decay and limits.

The package by concern (each module's docstring says what it owns):

- ``options``: SearchOptions, the checks and limits every search shares;
- ``keywords``: the keyword plan (FTS5 query and LIKE terms) and the query text vocabulary;
- ``statement``: build_statement, its result columns (RESULT_COLUMNS), Profile, explain_sql;
- ``searcher``: Searcher, which runs a search and reads the statement's rows by name;
- ``files``: a file's matching chunks as at most per_file results (file_hits);
- ``results``: SearchResult and SearchResults;
- ``snippets``: snippets, highlighting, and ``visible`` text for a terminal.

This module only re-exports, each name on first use: ``from hybridsql.search import ...`` names
what it always did.
"""

# What type checkers and editors see; at run time each name is imported on its first use (PEP
# 562, as hybridsql's own face does), so that importing one module of the package (the command
# line's options, a constant) does not import all of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from hybridsql.db.functions import BACKENDS
    from hybridsql.search.keywords import (
        MAX_TERM_CHARS,
        MAX_TERMS,
        STOPWORDS,
        KeywordPlan,
        _like_pattern,
        bounded,
        clean_text,
        keyword_plan,
    )
    from hybridsql.search.options import (
        COUNTS,
        FUSIONS,
        KEYWORD_NORMS,
        MAX_QUERY_CHARS,
        MAX_RESULTS,
        MODES,
        NUMBERS,
        SearchOptions,
        finite,
        params_limit,
        unix_time,
        whole,
    )
    from hybridsql.search.results import SearchResult, SearchResults
    from hybridsql.search.searcher import Searcher
    from hybridsql.search.snippets import highlight_terms, make_snippet, matched_heading, visible
    from hybridsql.search.statement import (
        RESERVED,
        RESULT_COLUMNS,
        RRF_K,
        Profile,
        build_statement,
        document_profile,
        explain_sql,
    )

_HOMES = {
    "hybridsql.db.functions": ("BACKENDS",),
    "hybridsql.search.keywords": (
        "MAX_TERM_CHARS",
        "MAX_TERMS",
        "STOPWORDS",
        "KeywordPlan",
        "_like_pattern",
        "bounded",
        "clean_text",
        "keyword_plan",
    ),
    "hybridsql.search.options": (
        "COUNTS",
        "FUSIONS",
        "KEYWORD_NORMS",
        "MAX_QUERY_CHARS",
        "MAX_RESULTS",
        "MODES",
        "NUMBERS",
        "SearchOptions",
        "finite",
        "params_limit",
        "unix_time",
        "whole",
    ),
    "hybridsql.search.results": (
        "SearchResult",
        "SearchResults",
    ),
    "hybridsql.search.searcher": ("Searcher",),
    "hybridsql.search.snippets": (
        "highlight_terms",
        "make_snippet",
        "matched_heading",
        "visible",
    ),
    "hybridsql.search.statement": (
        "RESERVED",
        "RESULT_COLUMNS",
        "RRF_K",
        "Profile",
        "build_statement",
        "document_profile",
        "explain_sql",
    ),
}
_HOME_OF = {name: home for home, names in _HOMES.items() for name in names}

__all__ = [
    "BACKENDS",
    "COUNTS",
    "FUSIONS",
    "KEYWORD_NORMS",
    "MAX_QUERY_CHARS",
    "MAX_RESULTS",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "MODES",
    "NUMBERS",
    "RESERVED",
    "RESULT_COLUMNS",
    "RRF_K",
    "STOPWORDS",
    "KeywordPlan",
    "Profile",
    "SearchOptions",
    "SearchResult",
    "SearchResults",
    "Searcher",
    "_like_pattern",
    "bounded",
    "build_statement",
    "clean_text",
    "document_profile",
    "explain_sql",
    "finite",
    "highlight_terms",
    "keyword_plan",
    "make_snippet",
    "matched_heading",
    "params_limit",
    "unix_time",
    "visible",
    "whole",
]


def __getattr__(name: str):
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'hybridsql.search' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
