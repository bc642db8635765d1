"""Hybrid search: one SQL statement fuses FTS5 bm25 with vector scores, decay and limits.

The statement (see docs/architecture.md) takes vector candidates from a k-nearest query on the
``vectors`` table (backend ``extension``: vector_index in the native extension) or from a JSON
list found by :class:`hybridsql.vectors.VectorReader` in numpy or pure Python (backends ``numpy``
and ``python``), keyword candidates from FTS5, joins both, scores, decays, filters and limits.
"""

import functools
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from hybridsql.chunking import heading_at
from hybridsql.discovery import is_markdown
from hybridsql.errors import QueryError
from hybridsql.functions import BACKENDS, MAX_K
from hybridsql.options import option
from hybridsql.schema import FTS_TABLES, has_fts

MODES = ("hybrid", "keyword", "semantic")
FUSIONS = ("linear", "rrf")
KEYWORD_NORMS = ("max", "saturation")
RRF_K = 60
# The most results, candidates or terms a search takes: the extension's maximum k, so every
# count is checked before it reaches SQL, the same for every way in.
MAX_RESULTS = MAX_K
# The longest query, in characters: a megabyte of text. A search reads no more of a query than
# it needs for its MAX_TERMS distinct terms and the model's tokens, but what reads the whole of
# it (cleaning, splitting) still grows with its length, and the MCP server answers one call at
# a time.
MAX_QUERY_CHARS = 1_000_000

_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_TERMS = 32  # distinct query terms kept, for FTS5 and for LIKE
MAX_TERM_CHARS = 64  # longer words and CJK runs are cut (a sha256 in hex still fits)
_WORD = re.compile(rf"[^\W_{_CJK}]+")
_PIECE = re.compile(f"[^\\s{_CJK}]+")  # text between whitespace and CJK
_EDGES = ".,;:!?\"'()[]{}"  # punctuation around a typed word
# Function words, left out of keyword queries that have other words: "recipe for chocolate
# cake" must not match every note that says "for".
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
""".split()
)


@dataclass
class SearchOptions:
    """Everything a search can be told: HybridIndex.search's keyword arguments and, derived from
    these fields (see hybridsql.options), the flags of ``hybridsql search``."""

    mode: str = option(
        "hybrid", "keyword (FTS5 bm25), semantic (vectors) or both fused", choices=MODES
    )
    vector_weight: float = option(0.7, "weight of the vector score in the linear fusion")
    keyword_weight: float = option(0.3, "weight of the keyword score in the linear fusion")
    min_score: float = option(0.1, "drop results whose relevance (before decay) is lower")
    max_results: int = option(10, "how many results", short="-n")
    half_life_days: float = option(
        30.0, "days for a dated note's (memory/YYYY-MM-DD.md) score to halve", flag="--half-life"
    )
    candidate_pool: int = option(100, "candidates taken from each side", flag="--pool")
    fusion: str = option("linear", "linear (weighted scores) or rrf (ranks)", choices=FUSIONS)
    keyword_norm: str = option(
        "max",
        "bm25 to [0, 1]: max (relative to the best) or saturation (absolute)",
        choices=KEYWORD_NORMS,
    )
    keyword_terms: int = option(
        0, "keep only the N rarest query words for bm25 (faster on long queries); 0 keeps all"
    )
    saturation: float = option(10.0, "the bm25 at which keyword_norm=saturation gives 0.5")
    vector_floor: float = option(0.25, "cosine below which a vector match counts as noise")
    prefix: bool = option(False, "match word prefixes (auth finds authentication)")
    mmr: bool = option(False, "re-rank for diversity (maximal marginal relevance)")
    mmr_lambda: float = option(0.7, "MMR's balance: 1 is relevance alone, 0 diversity alone")
    backend: str = option(
        "auto", "where vectors are ranked: the extension, numpy or pure Python", choices=BACKENDS
    )
    now: float | str | None = option(
        None, "the time to decay against: unix seconds or an ISO date (2026-11-22); default now"
    )
    decay: bool = option(
        True, "dated notes lose score with age; --no-decay ranks them by relevance alone"
    )
    group_by_file: bool = option(
        False, "one result per file: its best chunk, with the lines of its other matches"
    )

    def check(self) -> None:
        """Raises QueryError for a value no search can use."""
        choices = {
            "mode": MODES,
            "fusion": FUSIONS,
            "keyword_norm": KEYWORD_NORMS,
            "backend": BACKENDS,
        }
        for name, allowed in choices.items():
            value = getattr(self, name)
            if value not in allowed:
                raise QueryError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        for name in COUNTS:
            value, low = getattr(self, name), COUNTS[name]
            if not whole(value) or not low <= value <= MAX_RESULTS:
                rule = f"an integer from {low} to {MAX_RESULTS}"
                raise QueryError(f"{name} must be {rule}, not {value!r}")
        for name in NUMBERS:
            value = getattr(self, name)
            if name == "now":
                if value is None:
                    continue
                value = unix_time(value)
            if not finite(value):
                raise QueryError(f"{name} must be a finite number, not {value!r}")
        ranges = [
            ("vector_weight", self.vector_weight >= 0, ">= 0"),
            ("keyword_weight", self.keyword_weight >= 0, ">= 0"),
            ("saturation", self.saturation > 0, "> 0"),
            ("half_life_days", self.half_life_days > 0, "> 0"),
            ("vector_floor", 0 <= self.vector_floor < 1, "in [0, 1)"),
            ("mmr_lambda", 0 <= self.mmr_lambda <= 1, "in [0, 1]"),
        ]
        for name, ok, rule in ranges:
            if not ok:
                raise QueryError(f"{name} must be {rule}, not {getattr(self, name)!r}")


def unix_time(value):
    """``now`` as unix seconds: a number as it is, or text: a number, or an ISO-8601 date or
    time (``2026-11-22``, ``2026-11-22T09:30:00Z``), UTC when it has no offset, as
    temporal_decay() reads it."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    try:
        # Python 3.10's fromisoformat does not take the Z suffix.
        moment = datetime.fromisoformat(re.sub(r"[zZ]$", "+00:00", value.strip()))
    except ValueError:
        raise QueryError(
            f"now must be unix seconds or an ISO-8601 date or time like 2026-11-22, not {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def whole(value) -> bool:
    """Whether ``value`` is an integer (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite(value) -> bool:
    """Whether ``value`` is a number SQLite takes as it is: a float neither NaN nor infinite,
    or an integer of 64 bits (a bool is neither)."""
    if whole(value):
        return -(2**63) <= value < 2**63
    return isinstance(value, float) and math.isfinite(value)


# The integer options and their least values; the most is MAX_RESULTS. keyword_terms 0 keeps
# every term.
COUNTS = {"max_results": 1, "candidate_pool": 1, "keyword_terms": 0}
NUMBERS = (
    "vector_weight",
    "keyword_weight",
    "min_score",
    "half_life_days",
    "saturation",
    "vector_floor",
    "mmr_lambda",
    "now",
)


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
    # With group_by_file: [start_line, end_line] of the file's other chunks that matched.
    other_ranges: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # the profile's columns

    def as_dict(self) -> dict:
        return asdict(self)


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

    def __iter__(self):
        return iter(self.results)

    def __len__(self):
        return len(self.results)

    def __getitem__(self, i):
        return self.results[i]


# -- the keyword side -------------------------------------------------------------------------


@dataclass
class KeywordPlan:
    """How a user's text becomes keyword search: an FTS5 query on one table, and LIKE terms.

    ``any_of`` holds the OR-ed terms of ``match`` when the statement may keep only the rarest.
    """

    table: str | None
    match: str | None
    like_terms: list
    any_of: list = field(default_factory=list)


def keyword_plan(
    query: str, fts: bool = True, prefix: bool = False, tables=FTS_TABLES["document"]
) -> KeywordPlan:
    """Turns text into FTS5 syntax that cannot fail: every term is a quoted string.

    ASCII and other non-CJK text goes to the ``porter unicode61`` table, its words OR-ed so a
    document with only some of them is still found (a word that FTS5 would split, like
    ``ERR_CONN_RESET``, becomes a phrase; stopwords are dropped unless nothing else is left).
    Text with CJK goes to the trigram table, its CJK runs and words AND-ed (runs under three
    characters cannot use trigrams and are left to LIKE). The LIKE terms (CJK runs of any
    length, words of three or more characters) serve when FTS5 is missing or finds nothing.
    ``tables``: the (porter, trigram) tables of the kind of chunks searched.
    """
    cjk_runs = bounded(dict.fromkeys(_CJK_RUN.findall(query)))
    words, stopwords = {}, {}
    for piece in dict.fromkeys(_PIECE.findall(query)):  # each distinct piece, in order
        parts = _WORD.findall(piece)
        if not parts:
            continue
        word = tuple(bounded(parts, MAX_TERMS // 4))
        if len(word) == 1 and word[0].lower() in STOPWORDS:
            stopwords.setdefault(word)
        else:
            words.setdefault(word)
            if len(words) == MAX_TERMS:
                break  # the rest of a long text cannot change the plan
    words = list(words or stopwords)[:MAX_TERMS]
    like_terms = bounded(cjk_runs + [w for piece in words for w in piece if len(w) >= 3])
    if not fts:
        return KeywordPlan(None, None, like_terms)
    if cjk_runs:
        terms = [t for t in cjk_runs + [" ".join(w) for w in words] if len(t) >= 3]
        match = " AND ".join(_quote(t) for t in terms) or None
        return KeywordPlan(tables[1], match, like_terms)
    terms = list(dict.fromkeys(_fts_term(w, prefix) for w in words))
    return KeywordPlan(tables[0], " OR ".join(terms) or None, like_terms, terms)


def _fts_term(word: tuple, prefix: bool) -> str:
    """One word of the query in FTS5 syntax. With ``prefix``, a one-part word matches as a
    prefix OR-ed with itself: bm25 then counts an exact hit twice, at the exact form's own (high)
    idf, so a memory's token ``tokw3x93`` ranks above the words it is a prefix of."""
    quoted = _quote(" ".join(word))
    return f"{quoted} OR {quoted}*" if prefix and len(word) == 1 else quoted


def bounded(terms, most: int = MAX_TERMS) -> list:
    """Distinct terms, at most ``most`` of them, each cut to MAX_TERM_CHARS: a pasted page or a
    megabyte of text must not build SQL deeper or LIKE patterns longer than SQLite allows.
    ``terms`` is read no further than it takes to find them."""
    kept = {}
    for term in terms:
        kept.setdefault(term[:MAX_TERM_CHARS])
        if len(kept) == most:
            break
    return list(kept)


def clean_text(text: str) -> str:
    """Text as SQLite can take it: lone surrogates (undecodable bytes, as Python decodes argv)
    become U+FFFD, as they do in indexed files."""
    return _SURROGATE.sub("\ufffd", text)


# What a terminal acts on or breaks a line at, or what reorders a line: C0 controls but tab,
# DEL, C1 controls, the line and paragraph separators, and the bidirectional marks, embeddings,
# overrides and isolates (an override can show a line's text in another order).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """Text from files, the index or the user made harmless on a terminal line: each control
    character but tab (an escape sequence that would clear the screen or retitle the window, a
    line break that would start what looks like another result) is shown as a Python-style
    escape, ``\\x1b``, ``\\x0a``, ``\\u2028``. JSON output is left as it is."""
    return _CONTROL.sub(_escape, text)


def _escape(match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# -- the statement -----------------------------------------------------------------------------


@dataclass
class Profile:
    """What a kind of search adds to the statement, all of it fixed SQL written in code.

    ``kind`` is the kind of chunks searched, 'document' or 'memory': the vector side reads only
    that partition of ``vectors``, the keyword side only that kind's full-text tables.
    ``join`` joins more tables to ``chunks c``; ``filters`` is a condition on them, applied to
    both candidate lists before their top-k; ``relevance`` scores a candidate from
    ``vector_score``, ``keyword_score`` and the joined columns (None: the fusion of the
    options); ``columns`` maps more result columns to their SQL. User values reach it only as
    parameters.
    """

    kind: str = "document"
    join: str = ""
    filters: str = ""
    relevance: str | None = None
    columns: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)


# The statement's own column names, which a Profile's columns may not reuse.
RESERVED = frozenset(
    "id kind path start_line end_line heading text created_at cosine rank krank keyword_tier"
    " vrank best_rank vector_score keyword_score relevance decay score semantic_hit keyword_hit"
    " vscore file_id file_rank file_ranges".split()
)


def document_profile(project: str | None = None) -> Profile:
    """The Profile of a document search; a project's documents are under ``projects/<name>/``."""
    if project is None:
        return Profile(kind="document")
    return Profile(
        kind="document",
        filters="instr('/' || c.path, '/projects/' || :doc_project || '/') > 0",
        params={"doc_project": project},
    )


def build_statement(
    plan: KeywordPlan,
    opts: SearchOptions,
    vector_source: str | None,
    profile: Profile,
    native: bool = False,
    vector_of=None,
) -> str:
    """The one search statement. ``vector_source`` is ``knn`` (a k-nearest query on the
    ``vectors`` table), ``json`` (candidates bound as :vector_candidates) or None (keyword-only).
    ``native``: the C extension is loaded, so FTS5 has its bm25_candidate() function.
    ``vector_of(id_sql)``: SQL for the vector of a chunk, for the candidates found by keyword."""
    clash = RESERVED.intersection(profile.columns)
    if clash:
        raise ValueError(f"profile columns would shadow the statement's own: {sorted(clash)}")
    join, filters = profile.join, profile.filters
    where = f"and {filters}" if filters else ""
    extra_sql = "".join(f",\n         {sql} as {name}" for name, sql in profile.columns.items())
    extra_names = "".join(f", {name}" for name in profile.columns)
    parts = []
    if vector_source == "knn":
        conds = " and kind = :kind"
        if profile.filters:  # the filtered ids, so that the top-k is taken among them
            conds += f" and rowid in (select c.id from chunks c {join} where {profile.filters})"
        parts.append(f"""vec(id, vscore) as materialized (
  select rowid, score from vectors
  where vector match :query_vector and k = :pool and model_id = :model{conds}
)""")
    elif vector_source == "json":
        parts.append("""vec(id, vscore) as materialized (
  select json_extract(value, '$[0]'), json_extract(value, '$[1]')
  from json_each(:vector_candidates)
)""")
    else:
        parts.append("vec(id, vscore) as (select null, null where 0)")
    if plan.match and opts.mode != "semantic":
        table, match, gate = plan.table, ":fts_query", ""
        if plan.any_of and opts.keyword_terms:
            # bm25 scores every row that matches any term, so common words cost the most and
            # weigh the least: keep the :keyword_terms rarest, counted by FTS5 itself.
            parts.append(f"""kw_terms(term, df) as materialized (
  select value, (select count(*) from {table} where {table} match value)
  from json_each(:fts_terms)
)""")
            parts.append("""kw_query(q) as (
  select group_concat(term, ' OR ') from (
    select term from kw_terms where df > 0 order by df, term limit :keyword_terms
  )
)""")
            # No row when no term is in the index, so FTS5 is never asked to match NULL.
            match, gate = "g.q", "(select q from kw_query where q is not null) as g cross join "
        # Ordered by bm25() (the `rank` alias below), not by FTS5's hidden rank column: for
        # that FTS5 sorts every matching row itself, where SQLite's sorter keeps only the
        # :pool best (a third of the keyword side's time at 100k chunks, bench/run.py).
        source, rank, test = f"{table} f", f"bm25({table})", where
        if filters:
            source += f" join chunks c on c.id = f.rowid {join}"
        if native:
            # bm25_candidate() is bm25() but NULL for rows that cannot make the :pool best,
            # which it drops before reading their lengths (most of bm25()'s time). It counts
            # the rows it ranks, so it must see only rows that pass the filters: CASE tests
            # them first.
            rank = f"bm25_candidate({table}, :pool)"
            if filters:
                rank, test = f"case when {filters} then {rank} end", ""
        parts.append(f"""kw_fts(id, rank) as materialized (
  select id, rank from (
    select f.rowid as id, {rank} as rank from {gate}{source}
    where {table} match {match} {test}
  )
  where rank is not null
  order by rank limit :pool
)""")
    else:
        parts.append("kw_fts(id, rank) as (select null, null where 0)")
    if plan.like_terms and opts.mode != "semantic":
        hits = " + ".join(
            f"(c.text like :like{i} escape '\\')" for i in range(len(plan.like_terms))
        )
        # The gate is the outer loop (CROSS JOIN keeps the order): no row when FTS5 found
        # something, and then the chunks are never read.
        parts.append(f"""kw_like(id, rank) as (
  select id, -hits from (
    select c.id, {hits} as hits
    from (select 1 where not exists (select 1 from kw_fts)) as gate cross join chunks c {join}
    where c.kind = :kind {where}
  )
  where hits > 0
  order by hits desc, id limit :pool
)""")
    else:
        parts.append("kw_like(id, rank) as (select null, null where 0)")
    parts.append("""kw(id, rank, krank, keyword_tier) as materialized (
  select id, rank, row_number() over (order by rank, id), keyword_tier
  from (select *, 'fts' as keyword_tier from kw_fts union all select *, 'like' from kw_like)
)""")
    parts.append("""vec_ranked(id, vrank) as materialized (
  select id, row_number() over (order by vscore desc, id) from vec where vscore >= :vector_floor
)""")
    parts.append("""cand(id) as (select id from vec_ranked union select id from kw)""")
    # The exact cosine of every candidate: the vector side's score, or for those found by
    # keyword alone, their vector's.
    cosine = (
        f"coalesce(vec.vscore, cosine_similarity(:query_vector, {vector_of('c.id')}))"
        if vector_source
        else "null"
    )
    parts.append(f"""scored as materialized (
  select c.id, c.kind, c.file_id, c.path, c.start_line, c.end_line, c.heading, c.text,
         c.created_at, {cosine} as cosine, kw.rank, kw.krank, kw.keyword_tier, vec_ranked.vrank,
         (select min(rank) from kw) as best_rank{extra_sql}
  from cand join chunks c on c.id = cand.id {join}
  left join kw on kw.id = cand.id left join vec on vec.id = cand.id
  left join vec_ranked on vec_ranked.id = cand.id
)""")
    if opts.fusion == "rrf":
        relevance = (
            f"(coalesce(:vector_weight / ({RRF_K} + vrank), 0)"
            f" + coalesce(:keyword_weight / ({RRF_K} + krank), 0))"
            f" * {RRF_K + 1} / (:vector_weight + :keyword_weight)"
        )
    elif profile.relevance:
        relevance = profile.relevance
    elif opts.keyword_norm == "saturation":
        relevance = "hybrid_score(vector_score, rank, :vector_weight, :keyword_weight, :saturation)"
    else:
        relevance = "(:vector_weight * vector_score + :keyword_weight * keyword_score)"
    keyword_score = {
        "max": "rank / best_rank",
        "saturation": "bm25_score(rank, :saturation)",
    }[opts.keyword_norm]
    decay = "temporal_decay(path, :now, :half_life_days)" if opts.decay else "1.0"
    parts.append(f"""fused as (
  select *, {relevance} as relevance, {decay} as decay
  from (
    select *,
           case when cosine >= :vector_floor
                then (cosine - :vector_floor) / (1 - :vector_floor) else 0.0 end as vector_score,
           coalesce({keyword_score}, 0.0) as keyword_score
    from scored
  )
)""")
    columns = """id, kind, path, start_line, end_line, heading, text, score, relevance, cosine,
       keyword_score, decay, vrank is not null as semantic_hit, rank is not null as keyword_hit,
       keyword_tier, file_ranges"""
    if opts.group_by_file:
        # One row per file, its best chunk, so that min_score and the limit count files; the
        # others' lines come along. A memory has no file and is its own group.
        file = "file_id, case when file_id is null then id end"
        parts.append(f"""passed as (
  select *, relevance * decay as score,
         row_number() over (partition by {file} order by relevance * decay desc, id) as file_rank,
         json_group_array(json_array(start_line, end_line)) over (
           partition by {file} order by start_line, id
           rows between unbounded preceding and unbounded following) as file_ranges
  from fused
  where relevance >= :min_score
)""")
        final = "from passed where file_rank = 1"
    else:
        parts.append("""passed as (
  select *, relevance * decay as score, null as file_ranges from fused
  where relevance >= :min_score
)""")
        final = "from passed"
    return (
        "with "
        + ",\n".join(parts)
        + f"""
select {columns}{extra_names}
{final}
order by score desc, id
limit :limit"""
    )


def explain_sql(sql: str, params: dict) -> str:
    """The statement with its parameters written in as SQL literals, runnable in the shell."""

    def literal(name):
        value = params[name]
        if value is None:
            return "NULL"
        if isinstance(value, (bytes, bytearray)):
            return "x'" + bytes(value).hex() + "'"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return repr(value)

    return re.sub(r":([a-z_0-9]+)", lambda m: literal(m.group(1)), sql) + ";"


# -- the search -------------------------------------------------------------------------------


class Searcher:
    """Runs searches on one connection. ``native``: the C extension is loaded on it, so the
    ``vectors`` table can be queried; otherwise the vector side always runs in Python."""

    def __init__(self, conn, embedder=None, native: bool = True):
        self.conn = conn
        self.embedder = embedder
        self.native = native
        self.readers = {}  # numpy or python -> VectorReader, which keeps the blocks it read
        self.fts = has_fts(conn)

    def search(
        self, query: str, opts: SearchOptions | None = None, profile: Profile | None = None
    ) -> SearchResults:
        opts = opts or SearchOptions()
        opts.check()
        profile = profile or document_profile()
        if not isinstance(query, str):
            raise QueryError(f"query must be text, not {type(query).__name__}")
        if len(query) > MAX_QUERY_CHARS:
            raise QueryError(
                f"the query is {len(query):,} characters long, over the limit of "
                f"{MAX_QUERY_CHARS:,}; search with its key sentences"
            )
        query = clean_text(query)
        mode, notes = opts.mode, []
        if mode != "keyword" and self.embedder is None:
            notes.append("no embedding provider is configured: keyword-only search")
            mode = "keyword"
        query_vector = None
        if mode != "keyword":
            query_vector = self.embedder.embed_one(query).astype("<f4")
            if not query_vector.any():
                # The provider's zero vector: text it cannot read (see embed.READABLE).
                notes.append(
                    f"{self.embedder.model_id} cannot read this query: keyword-only search"
                )
                mode, query_vector = "keyword", None
        opts = SearchOptions(**{**asdict(opts), "mode": mode})
        plan = keyword_plan(query, self.fts, opts.prefix, FTS_TABLES[profile.kind])
        params = {
            "pool": max(opts.candidate_pool, opts.max_results),
            "fts_query": plan.match,
            "fts_terms": json.dumps(plan.any_of),
            "keyword_terms": opts.keyword_terms,
            "vector_floor": opts.vector_floor,
            "vector_weight": opts.vector_weight,
            "keyword_weight": opts.keyword_weight,
            "saturation": opts.saturation,
            "now": time.time() if opts.now is None else unix_time(opts.now),
            "half_life_days": opts.half_life_days,
            "min_score": opts.min_score,
            "limit": params_limit(opts),
            "kind": profile.kind,
            **{f"like{i}": _like_pattern(t) for i, t in enumerate(plan.like_terms)},
            **profile.params,
        }
        source, backend, vector_of = None, self._backend(opts), None
        if query_vector is not None:
            params["query_vector"] = query_vector.tobytes()
            params["model"] = self.embedder.model_id
            vector_of = self._vector_of(len(query_vector))
            source = "knn" if backend == "extension" else "json"
            if source == "json":
                params["vector_candidates"] = json.dumps(
                    self._python_topk(backend, params, profile)
                )
        sql = build_statement(plan, opts, source, profile, self.native, vector_of)
        used = set(re.findall(r":([a-z_0-9]+)", sql))
        params = {k: v for k, v in params.items() if k in used}
        rows = self.conn.execute(sql, params).fetchall()
        terms = highlight_terms(query)
        results = [self._result(r, terms, opts.prefix, list(profile.columns)) for r in rows]
        if opts.mmr and results:
            results = self._mmr(results, params, opts, vector_of)
        return SearchResults(
            results=results[: opts.max_results],
            mode=mode,
            backend=backend,
            keyword_tier=next((r[14] for r in rows if r[14]), "none"),
            notes=notes,
            sql=sql,
            params=params,
        )

    def _backend(self, opts) -> str:
        """What finds the vector candidates: the extension in SQL, or numpy or pure Python."""
        if opts.backend == "auto":
            return "extension" if self.native else "numpy"
        if opts.backend == "extension" and not self.native:
            raise QueryError(
                "backend extension needs hybridsql's native extension, which this connection has"
                " not loaded: use backend numpy or python"
            )
        return opts.backend

    def _vector_of(self, dims: int):
        """SQL for the vector of the chunk whose id is id_sql, in the current model."""
        if self.native:
            return lambda id_sql: (
                f"(select v.vector from vectors v where v.chunk_id = {id_sql}"
                " and v.model_id = :model)"
            )
        reader = self._reader("numpy")
        return lambda id_sql: reader.vector_sql(id_sql, dims, {"model_id": "model"})

    def _reader(self, math_: str) -> "VectorReader":  # noqa: F821 (imported on first use)
        from hybridsql.vectors import VectorReader

        if math_ not in self.readers:
            self.readers[math_] = VectorReader(self.conn, "vectors", math_=math_)
        return self.readers[math_]

    def _python_topk(self, backend, params, profile) -> list:
        """The vector candidates found by VectorReader (numpy or pure Python), the filters'
        rows only."""
        ids = None
        if profile.filters:
            ids = [
                r[0]
                for r in self.conn.execute(
                    f"select c.id from chunks c {profile.join} where {profile.filters}",
                    profile.params,
                )
            ]
        where = {"model_id": params["model"], "kind": profile.kind}
        return self._reader(backend).topk(params["query_vector"], params["pool"], where, ids)

    @staticmethod
    def _result(row, terms, prefix, extra_names) -> SearchResult:
        id_, kind, path, start, end, heading, text, score, relevance = row[:9]
        cosine, kscore, decay, semantic, keyword, _, ranges = row[9:16]
        match = "both" if semantic and keyword else ("semantic" if semantic else "keyword")
        if keyword and (kind != "document" or is_markdown(path)):  # plain text has no headings
            heading = matched_heading(text, heading, start, terms, prefix)
        return SearchResult(
            id=id_,
            kind=kind,
            path=path,
            start_line=start,
            end_line=end,
            heading=heading,
            text=text,
            snippet=make_snippet(text, terms, prefix=prefix),
            score=score,
            relevance=relevance,
            vector_score=cosine,
            keyword_score=kscore if keyword else None,
            decay=decay,
            match_type=match,
            other_ranges=[r for r in json.loads(ranges) if r != [start, end]] if ranges else [],
            extra=dict(zip(extra_names, row[16:], strict=False)),
        )

    def _mmr(self, results, params, opts, vector_of):
        """Maximal marginal relevance: trade a little score for results unlike those above."""
        if "query_vector" not in params:
            return results
        ids = [r.id for r in results]
        marks = ", ".join(f":id{i}" for i in range(len(ids)))
        blobs = dict(
            self.conn.execute(
                f"select c.id, {vector_of('c.id')} from chunks c where c.id in ({marks})",
                {"model": params["model"], **{f"id{i}": v for i, v in enumerate(ids)}},
            ).fetchall()
        )
        import numpy as np

        vecs = {}
        for i in ids:
            if blobs.get(i) is not None:
                v = np.frombuffer(blobs[i], dtype="<f4").astype(np.float64)
                n = np.linalg.norm(v)
                vecs[i] = v / n if n else v
        chosen, rest = [], list(results)
        while rest and len(chosen) < opts.max_results:

            def gain(r):
                sim = max(
                    (
                        float(vecs[r.id] @ vecs[c.id])
                        for c in chosen
                        if r.id in vecs and c.id in vecs
                    ),
                    default=0.0,
                )
                return opts.mmr_lambda * r.score - (1 - opts.mmr_lambda) * sim

            best = max(rest, key=gain)
            chosen.append(best)
            rest.remove(best)
        return chosen


def params_limit(opts: SearchOptions) -> int:
    """MMR picks from the whole pool; otherwise the statement stops at max_results."""
    return max(opts.candidate_pool, opts.max_results) if opts.mmr else opts.max_results


def highlight_terms(query: str) -> list:
    """What a snippet marks: each word of the query as typed, its parts, and its CJK runs;
    stopwords only when the query has nothing else, as in keyword_plan."""
    content = bounded(t for t in _typed_terms(query) if t and t.lower() not in STOPWORDS)
    return content or bounded(t for t in _typed_terms(query) if t)


def _typed_terms(query: str):
    pieces = dict.fromkeys(query.split())
    for piece in pieces:
        yield piece.strip(_EDGES)
    for piece in pieces:
        yield from _WORD.findall(piece.strip(_EDGES))
    yield from dict.fromkeys(_CJK_RUN.findall(query))


# Letters, digits and _ but not CJK: what a marked word may not continue into. An identifier
# such as ERR_INVALID_ARG_TYPE is one word, so ERR does not mark a piece of it. The class holds
# both cases already, so IGNORECASE is turned off inside it: case-folding its Unicode ranges
# made compiling a search's pattern take about 20 ms, every search of a new process.
_WORD_CHAR = f"(?-i:[^\\W{_CJK}])"


def _inflected(term: str) -> str:
    """The regex of a typed word and its regular inflections (plural, possessive, -ed, -ing),
    which porter stemming finds too: ``deploy`` marks ``deploys`` and ``deployed``, and
    ``releases`` marks ``release``; never the start of an unrelated longer word (``arg`` in
    ``argument``). Words of under three characters mark only themselves: ``in`` + ``g`` is
    another word."""
    if len(term) > 3 and term[-1] in "sS" and term[-2] not in "sS'":
        term = term[:-1]
    word = re.escape(term)
    if len(term) < 3 or not term[-1].isalpha():
        return word
    if term[-1] in "eE":
        suffixes = ("s", "d", "'s")
    else:
        plural = "es" if term.lower().endswith(("s", "x", "z", "ch", "sh")) else "s"
        suffixes = (plural, "ed", "ing", "'s")
    return word + "(?:" + "|".join(suffixes) + ")?"


@functools.lru_cache(maxsize=64)
def _mark_pattern(terms: tuple, prefix: bool = False):
    """The regex that marks ``terms``, longest first; built once per search, not per result.

    CJK terms match anywhere. Other terms mark whole words only: the word itself or an
    inflection of it (``_inflected``), or with ``prefix`` (the search matched word prefixes)
    any word that starts with it, marked whole (``auth`` marks ``authentication``). One
    look-behind for all the words, where one per term made Python try every term at every
    position (5 x slower). CJK terms go first: one that matches where a word does is the longer.
    """
    ordered = sorted(terms, key=len, reverse=True)
    cjk = [re.escape(t) for t in ordered if _CJK_RUN.search(t)]
    plain = [t for t in ordered if not _CJK_RUN.search(t)]
    if prefix:
        words = f"(?:{'|'.join(map(re.escape, plain))}){_WORD_CHAR}*"
    else:
        words = f"(?:{'|'.join(map(_inflected, plain))})(?!{_WORD_CHAR})"
    groups = cjk + ([rf"(?<!{_WORD_CHAR}){words}"] if plain else [])
    return re.compile("|".join(groups), re.IGNORECASE)


def make_snippet(text: str, terms, width: int = 240, prefix: bool = False) -> str:
    """About ``width`` characters of ``text`` around the first query term, terms in <mark>
    (whole words only: see ``_mark_pattern``)."""
    if not terms:
        return text[:width].strip() + ("…" if len(text) > width else "")
    pattern = _mark_pattern(tuple(terms), prefix)
    first = pattern.search(text)
    start = max(0, first.start() - width // 3) if first else 0
    piece = pattern.sub(lambda m: f"<mark>{m.group()}</mark>", text[start : start + width])
    return ("…" if start else "") + piece.strip() + ("…" if start + width < len(text) else "")


def matched_heading(text: str, heading: str, start_line: int, terms, prefix: bool) -> str:
    """The heading path over the first line a snippet marks: a chunk of several sections is
    labelled by the section that matched. The chunk's own ``heading`` where nothing is marked."""
    first = _mark_pattern(tuple(terms), prefix).search(text) if terms else None
    if first is None:
        return heading
    return heading_at(text, heading, text.count("\n", 0, first.start()), start_line == 1)
