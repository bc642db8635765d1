"""The one search statement: build_statement, its result columns (named once, RESULT_COLUMNS),
the Profile a kind of search adds to it, and explain_sql.

The statement (see docs/architecture.md) takes vector candidates from a k-nearest query on the
``vectors`` table (backend ``extension``: vector_index in the native extension) or from a JSON
list found by :class:`hybridsql.db.vectors.VectorReader` in numpy or pure Python (backends ``numpy``
and ``python``), keyword candidates from FTS5, joins both, scores, decays, filters and limits.
"""

import re
from dataclasses import dataclass, field

from hybridsql.search.keywords import KeywordPlan
from hybridsql.search.options import SearchOptions

RRF_K = 60


@dataclass
class Profile:
    """What a kind of search adds to the statement, all of it fixed SQL written in code.

    ``kind`` is the kind of chunks searched, 'document' or 'memory': the vector side reads only
    that partition of ``vectors``, the keyword side only that kind's full-text tables.
    ``join`` joins more tables to ``chunks c``; ``filters`` is a condition on them, applied to
    both candidate lists before their top-k. ``filter_table``: (a table and its alias, its
    column of chunk ids) when every column the filters read is in that one table (a memory's,
    ``("memories m", "m.chunk_id")``): the candidate lists test them on it alone, without
    reading ``chunks`` (a fifth of the vector side at 2,000 memories, docs/benchmarks.md).
    ``filters_keep_most``: they keep most of the kind's chunks, so the vector side has SQLite
    test them on the rows vector_index hands best first (``order by score desc limit``, which
    stops at the pool) rather than hand it the list of every id they keep (``rowid in (select
    ...)``: a pass over all of them, cheap only when they are few; docs/benchmarks.md).
    ``relevance`` scores a candidate from ``vector_score``, ``keyword_score`` and the joined
    columns (None: the fusion of the options); ``columns`` maps more result columns to their
    SQL. ``late`` maps result columns that only show a result (nothing ranks by them) to SQL
    over ``hit.id``, the chunk's id: they are computed for the rows returned alone, not for
    every candidate. User values reach it only as parameters.
    """

    kind: str = "document"
    join: str = ""
    filters: str = ""
    filter_table: tuple = ()
    filters_keep_most: bool = False
    relevance: str | None = None
    columns: dict = field(default_factory=dict)
    late: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)


# The statement's result columns, in the order it selects them: each name and the SQL that
# makes it from the last CTE (``passed``). The searcher reads a row by these names, then the
# Profile's columns (result_names), so a new result column is one entry here.
RESULT_COLUMNS = {
    "id": "id",
    "kind": "kind",
    "path": "path",
    "start_line": "start_line",
    "end_line": "end_line",
    "heading": "heading",
    "text": "text",
    "score": "score",
    "relevance": "relevance",
    "cosine": "cosine",
    "keyword_score": "keyword_score",
    "decay": "decay",
    "semantic_hit": "vrank is not null",
    "keyword_hit": "rank is not null",
    "keyword_tier": "keyword_tier",
    "file_ranges": "file_ranges",
    "file_id": "file_id",
}
# The statement's own column names, which a Profile's columns may not reuse: the results' and
# those of its CTEs.
RESERVED = frozenset(RESULT_COLUMNS) | frozenset(
    "created_at rank krank vrank best_rank vector_score vscore file_id file_rank".split()
)


def result_names(profile: "Profile") -> tuple:
    """The names of the statement's columns, in order: RESULT_COLUMNS, then the profile's
    (``columns``, then ``late``)."""
    return (*RESULT_COLUMNS, *profile.columns, *profile.late)


def _select_list(columns: dict) -> str:
    """``sql as name`` (the name alone where they are the same), wrapped before 100 characters
    under ``select ``, as the statement has always been written."""
    lines, line = [], "select"
    for name, sql in columns.items():
        item = name if sql == name else f"{sql} as {name}"
        if len(line) + len(item) + 2 >= 100:
            lines.append(line)
            line = "      "
        line += f" {item},"
    return "\n".join([*lines, line.rstrip(",")])


def filter_source(profile: Profile) -> tuple[str, str]:
    """Where the profile's filters are tested: (the tables, as SQL after ``from``; the chunk's
    id in them)."""
    if profile.filter_table:
        return profile.filter_table
    return f"chunks c {profile.join}", "c.id"


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
    clash = RESERVED.intersection([*profile.columns, *profile.late])
    if clash:
        raise ValueError(f"profile columns would shadow the statement's own: {sorted(clash)}")
    join, filters = profile.join, profile.filters
    where = f"and {filters}" if filters else ""
    extra_sql = "".join(f",\n         {sql} as {name}" for name, sql in profile.columns.items())
    extra_names = "".join(f", {name}" for name in profile.columns)
    tested, key = filter_source(profile)
    parts = []
    if vector_source == "knn" and profile.filters and profile.filters_keep_most:
        parts.append(f"""vec(id, vscore) as materialized (
  select v.rowid, v.score from vectors v
  where v.vector match :query_vector and v.model_id = :model and v.kind = :kind
    and exists (select 1 from {tested} where {key} = v.rowid and {profile.filters})
  order by v.score desc limit :pool
)""")
    elif vector_source == "knn":
        conds = " and kind = :kind"
        if profile.filters:  # the filtered ids, so that the top-k is taken among them
            conds += f" and rowid in (select {key} from {tested} where {profile.filters})"
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
        if filters and profile.filter_table:
            source += f" join {tested} on {key} = f.rowid"
        elif filters:
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
    # keyword alone, their vector's. The table scores those in one query over their rowids (the
    # same arithmetic as cosine_similarity(), to the bit), where a lookup of each one's vector
    # cost a statement of the table's own apiece; the other backends read each vector.
    cosine_join = ""
    if vector_source == "knn":
        parts.append("""kw_cos(id, cosine) as materialized (
  select rowid, score from vectors
  where vector match :query_vector and model_id = :model
    and rowid in (select id from kw where id not in (select id from vec))
)""")
        cosine = "coalesce(vec.vscore, kw_cos.cosine)"
        cosine_join = " left join kw_cos on kw_cos.id = cand.id"
    elif vector_source:
        cosine = f"coalesce(vec.vscore, cosine_similarity(:query_vector, {vector_of('c.id')}))"
    else:
        cosine = "null"
    parts.append(f"""scored as materialized (
  select c.id, c.kind, c.file_id, c.path, c.start_line, c.end_line, c.heading, c.text,
         c.created_at, {cosine} as cosine, kw.rank, kw.krank, kw.keyword_tier, vec_ranked.vrank,
         (select min(rank) from kw) as best_rank{extra_sql}
  from cand join chunks c on c.id = cand.id {join}
  left join kw on kw.id = cand.id left join vec on vec.id = cand.id
  left join vec_ranked on vec_ranked.id = cand.id{cosine_join}
)""")
    # The fusion scores each side: linear by its value (the cosine over the floor, bm25 by
    # keyword_norm), rrf by its rank (k = RRF_K, scaled so that the first is 1.0). The profile's
    # relevance combines the two as it does under either, so a ranking applies under both.
    if opts.fusion == "rrf":
        vector_score = f"coalesce({RRF_K + 1.0} / ({RRF_K} + vrank), 0.0)"
        keyword_score = f"{RRF_K + 1.0} / ({RRF_K} + krank)"
    else:
        vector_score = (
            "case when cosine >= :vector_floor"
            " then (cosine - :vector_floor) / (:vector_ceiling - :vector_floor) else 0.0 end"
        )
        keyword_score = {
            "max": "rank / best_rank",
            "saturation": "bm25_score(rank, :saturation)",
        }[opts.keyword_norm]
    linear = "(:vector_weight * vector_score + :keyword_weight * keyword_score)"
    if profile.relevance:
        relevance = profile.relevance
    elif opts.fusion == "rrf":
        relevance = f"{linear} / (:vector_weight + :keyword_weight)"
    elif opts.keyword_norm == "saturation":
        # hybrid_score() takes a score of at most 1: a cosine over the model's ceiling is one.
        relevance = (
            "hybrid_score(min(vector_score, 1.0), rank, :vector_weight, :keyword_weight,"
            " :saturation)"
        )
    else:
        relevance = linear
    decay = "temporal_decay(path, :now, :half_life_days)" if opts.decay else "1.0"
    parts.append(f"""fused as (
  select *, {relevance} as relevance, {decay} as decay
  from (
    select *, {vector_score} as vector_score, coalesce({keyword_score}, 0.0) as keyword_score
    from scored
  )
)""")
    columns = _select_list(RESULT_COLUMNS)
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
    if profile.late:  # over the rows returned alone: the candidates' first, then these
        late = "".join(f",\n       {sql} as {name}" for name, sql in profile.late.items())
        final = f"from (select * {final} order by score desc, id limit :limit) as hit"
        return (
            "with "
            + ",\n".join(parts)
            + f"""
{columns}{extra_names}{late}
{final}
order by score desc, id"""
        )
    return (
        "with "
        + ",\n".join(parts)
        + f"""
{columns}{extra_names}
{final}
order by score desc, id
limit :limit"""
    )


def explain_sql(sql: str, params: dict, embedded: str | None = None) -> str:
    """The statement with its parameters written in as SQL literals, runnable in the shell;
    with ``embedded`` (SearchResults.embedded), the query vector as ``embed('embedded')``, which
    the extension's model computes in any client."""

    def text(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    def literal(name):
        value = params[name]
        if name == "query_vector" and embedded is not None:
            return f"embed({text(embedded)})"
        if value is None:
            return "NULL"
        if isinstance(value, (bytes, bytearray)):
            return "x'" + bytes(value).hex() + "'"
        if isinstance(value, str):
            return text(value)
        return repr(value)

    return re.sub(r":([a-z_0-9]+)", lambda m: literal(m.group(1)), sql) + ";"
