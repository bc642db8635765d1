"""Search results: SearchResult (one chunk found, and how its score was made) and SearchResults."""

from dataclasses import dataclass, field


@dataclass
class SearchResult:
    """One chunk found: where it is, its text, and how its score was made."""

    id: int
    kind: str
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    snippet: str
    score: float
    relevance: float
    vector_score: float | None
    keyword_score: float | None
    decay: float
    match_type: str
    # [start_line, end_line] of the file's other matching chunks that no result shows
    # (group_by_file, or past per_file), on the file's first result.
    other_ranges: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # the profile's columns

    def as_dict(self) -> dict:
        # asdict()'s answer, its containers copied, the numbers and strings shared (the
        # profile's columns are SQL values)
        out = dict(self.__dict__)
        out["other_ranges"] = [list(r) for r in self.other_ranges]
        out["extra"] = dict(self.extra)
        return out


@dataclass
class SearchResults:
    """The results of one search, with what ran and why (``notes``)."""

    results: list = field(default_factory=list)
    mode: str = "hybrid"
    backend: str = "sql"
    keyword_tier: str = "none"  # what found the keyword matches: fts, like or none
    notes: list = field(default_factory=list)
    sql: str = ""
    params: dict = field(default_factory=dict)
    # The text whose embed() in SQL gives params["query_vector"] (the query, where the
    # extension's model embedded it), else None: explain_sql writes embed('...') for it.
    embedded: str | None = None

    def __iter__(self):
        return iter(self.results)

    def __len__(self):
        return len(self.results)

    def __getitem__(self, i):
        return self.results[i]
