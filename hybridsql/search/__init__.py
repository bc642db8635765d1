"""Hybrid search: one SQL statement fuses FTS5 bm25 with vector scores, decay and limits.

The package by concern (each module's docstring says what it owns):

- ``options``: SearchOptions, the checks and limits every search shares;
- ``keywords``: the keyword plan (FTS5 query and LIKE terms) and the query text vocabulary;
- ``statement``: build_statement, its result columns (RESULT_COLUMNS), Profile, explain_sql;
- ``searcher``: Searcher, which runs a search and reads the statement's rows by name;
- ``files``: a file's matching chunks as at most per_file results (file_hits);
- ``results``: SearchResult and SearchResults;
- ``snippets``: snippets, highlighting, and ``visible`` text for a terminal.

This module only re-exports: ``from hybridsql.search import ...`` names what it always did.
"""

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
