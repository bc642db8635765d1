"""SQL injection: no table, column or value a user gives is ever spliced into SQL text.

Two proofs. At run time, quote-laden, table- and column-like values carrying a marker go through
every public entry point (indexing a folder whose names and contents carry them, every search
mode and backend, every MemoryStore method, the CLI), while SQLite's own trace records the text
of every statement prepared, triggers and the extension's statements included: the marker is in
none of them, every value comes back verbatim, and the schema is untouched. Statically, every
f-string, ``.format()`` and concatenation in hybridsql/ whose text is SQL interpolates only
expressions from REVIEWED, each of which is a constant of the code (the review is written next
to each); a new interpolation fails the test until someone reviews it.
"""

import ast
import json
import re
import subprocess
from pathlib import Path

import apsw
import numpy as np
import pytest
from conftest import HYBRIDSQL

from hybridsql.errors import HybridSQLError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore
from hybridsql.search import BACKENDS, MODES, SearchOptions

MARK = "zq9x"
HOSTILE = [
    f"{MARK}'; drop table chunks; --",
    f'{MARK}" or ""="',
    f"{MARK}') union select name, sql from sqlite_schema --",
    f"chunks_{MARK}",
    f"[{MARK}]",
    f"`{MARK}`",
    f"{MARK} :fts_query ?1 @p $x",
    f"{MARK} %_\\ escape",
    f"{MARK} AND OR NOT NEAR( * ^ text:",
    f"x'{MARK}'",
    f"{MARK} /* */ ;",
    f"{MARK}\x00after a NUL",
]
SRC = Path(__file__).resolve().parent.parent / "hybridsql"


class HashProvider:
    """Words hashed into 32 dimensions: vectors without the cost of a model."""

    model_id = "hash-32"
    dims = 32

    def embed(self, texts):
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(word.encode()) % self.dims] += 1
        return out


@pytest.fixture
def traced(tmp_path):
    """A HybridIndex whose connection records the text of every statement SQLite prepares."""
    folder = tmp_path / f"folder {MARK}'; drop table files; --"
    (folder / "memory").mkdir(parents=True)
    for i, value in enumerate(HOSTILE):
        text = value.replace("\x00", " ")  # a NUL would make the file binary
        name = text.replace("/", "_")
        (folder / "memory" / f"{i} {name}.md").write_text(f"# {text}\n\n{text} deploy\n")
    idx = HybridIndex(str(tmp_path / f"{MARK}'.db"), embedder=HashProvider())
    statements = []
    idx.conn.trace_v2(apsw.SQLITE_TRACE_STMT, lambda event: statements.append(event["sql"]))
    yield idx, folder, statements
    idx.close()


def test_hostile_values_are_bound_through_every_entry_point(traced, tmp_path):
    idx, folder, statements = traced
    report = idx.index_folder(str(folder))
    assert report.files_indexed == len(HOSTILE) and report.skipped == []
    store = MemoryStore(idx, memory_dir=str(folder))
    stored, extracted = [], 0
    for value in HOSTILE:
        for mode in MODES:
            for backend in BACKENDS:
                idx.search(value, mode=mode, backend=backend, prefix=True)
        session = store.start_session(project=value)
        memory = store.add(value, project=value, tier="global", session_id=session.id)
        assert (memory.content, memory.project, memory.tier) == (value, value, "global")
        newer = store.supersede(memory.id, value + " v2", created_by=value)
        store.reinforce(newer.id, session_id=session.id)
        store.relate(newer.id, memory.id, "SEE_ALSO", created_by=value)
        found = store.search(value, project=value, tier="global", session_id=session.id)
        assert [hit.memory.id for hit in found] == [newer.id]
        store.search_documents(value, project=value)
        store.timeline(newer.id)
        store.session_context(newer.id)
        store.end_session(session.id, summary=value)
        try:
            store.extract_memory(value, value, value, tags=[value])
            extracted += 1
        except HybridSQLError:  # a refusal is fine: control characters in a title, say
            pass
        stored.append(newer.id)
        for option in ("mode", "fusion", "keyword_norm", "backend"):
            with pytest.raises(HybridSQLError):
                idx.search("deploy", **{option: value})
        with pytest.raises(HybridSQLError):
            store.search("deploy", sector=value)
        with pytest.raises(HybridSQLError):
            store.search("deploy", tier=value)
        with pytest.raises(HybridSQLError):
            store.add(value, tier=value)
    store.delete(stored[0])
    store.delete(stored[1], hard=True)

    assert extracted >= len(HOSTILE) // 2
    assert len(statements) > 500
    spliced = [sql for sql in statements if MARK in sql]
    assert spliced == [], spliced[:3]
    print(f"\n{len(statements)} statements traced, {len(set(statements))} distinct, 0 spliced")
    tables = {row[0] for row in idx.conn.execute("select name from sqlite_schema")}
    assert {"files", "chunks", "vectors", "memories", "sessions", "chunks_fts"} <= tables
    paths = {row[0] for row in idx.conn.execute("select path from files")}
    assert len([p for p in paths if MARK in p]) == len(HOSTILE)
    keyword = idx.search(MARK, mode="keyword", limit=50)
    assert len(keyword) >= len(HOSTILE)


def test_hostile_values_through_the_cli_come_back_verbatim(tmp_path):
    """The command line: values arrive in argv and leave in JSON, the schema untouched."""
    db = str(tmp_path / "cli.db")
    base = [HYBRIDSQL, "memory"]
    for value in HOSTILE[:-1]:  # argv cannot carry a NUL
        added = subprocess.run(
            [
                *base,
                "add",
                value,
                "--project",
                value,
                "--tier",
                "session",
                "--db",
                db,
                "--embedder",
                "none",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        memory = json.loads(added.stdout)
        assert (memory["content"], memory["project"], memory["tier"]) == (value, value, "session")
        found = subprocess.run(
            [*base, "search", value, "--project", value, "--db", db, "--embedder", "none"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert [hit["memory"]["id"] for hit in json.loads(found.stdout)["results"]] == [
            memory["id"]
        ]
    conn = apsw.Connection(db)
    assert conn.execute("select count(*) from memories").fetchone() == (len(HOSTILE) - 1,)
    assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]


# -- the static review -------------------------------------------------------------------------

SQL_TEXT = re.compile(
    r"\b(select|insert|update|delete|create|where|join|values|escape)\b|:[a-z_]+\b", re.I
)

# Every expression interpolated into SQL text in hybridsql/, by file, with why it is a constant
# of the code. Reviewed on 2026-11-22.
REVIEWED = {
    # A filter tree's SQL: operators and SQL written in code, each key's JSON path and each
    # value bound as a :fN parameter (tests/test_langchain.py sends hostile keys and values).
    "integrations/documents.py": {
        "cond": "filter_sql's text: code's SQL and :fN parameter names",
        "ids_sql": "Collection.nearest's constant text and filter_sql's",
        "nearest": "Collection.nearest's constant text (the MATCH with :q)",
        "kind": "Collection.nearest's constant text (:model, 'document')",
        "at": "a :fN parameter name from bind()",
        "bind(_value(node.value, node.key))": "a :fN parameter name from bind()",
        "node.key": "a refused filter's field in an error message, not SQL",
        "node.op": "a refused filter's operator in an error message, not SQL",
        '", ".join(["?"] * len(part))': "one ? placeholder for each id of a statement",
    },
    # Error messages that read like SQL ("create an index with ..."): never executed.
    "db/extension.py": {
        "path": "a database's file name in an error message, not SQL",
        "package": "the package's folder in an error message, not SQL",
        "os.path.basename(path)": "the native extension's file name in an error message, not SQL",
        "dims[1]": "a number of dimensions from SQLite's error, in an error message, not SQL",
        "dims[2]": "as dims[1]",
    },
    # Error messages that name a model and the command that re-indexes ("made by ... with"):
    # never executed.
    "embedding/choice.py": {
        "spec": "the refused --embedder value in an error message, not SQL",
        "db": "an index's file name in an error message, not SQL",
        "flag(kind, name)": "the --model or --embedder flag of a command in an error message",
    },
    "cli.py": {
        "', '.join(EMBEDDERS)": "an error message naming --embedder's forms (llm:MODEL_ID), not SQL",
        "value": "the refused --embedder value in an error message, not SQL",
    },
    "indexing/index.py": {
        "table": "insert_rows: a key of ROW_COLUMNS (any other is a KeyError before the SQL)",
        "', '.join(columns)": "insert_rows: the column names ROW_COLUMNS, a constant, holds",
    },
    "mcp/http.py": {"text": "the refused --http value in an error message (HOST:PORT), not SQL"},
    "db/replication.py": {
        "table": "an FTS5 table's name read from the restored file's schema, quoted as an "
        "identifier (its double quotes doubled)",
    },
    "embedding/providers.py": {
        "spec": "the refused embedder name in an error message (openai:MODEL), not SQL",
    },
    "memory/ranking.py": {
        "PREVIEW_CHARS": "module constant, an int",
        "SUPERSEDES": "module constant, the relation name",
        "DAY": "module constant, a float",
        "s": "each of SECTORS, a module constant tuple",
    },
    "memory/sessions.py": {
        "_SESSION_SQL": "module constant: the columns of sessions",
        "_SOURCE_SESSION.format(id='?')": "module constant with a placeholder in it",
    },
    "memory/timeline.py": {
        "kept": "one of two literals of MemoryStore.recent, chosen by include_superseded",
        "_MEMORY_SQL": "module constant: the columns of a memory",
        "sql": "timeline()'s own constant text, formatted with literals",
    },
    "memory/writes.py": {
        "_MEMORY_SQL": "module constant: the columns of a memory",
    },
    "search/statement.py": {
        "join": "Profile.join: SQL written in code (document_profile, memory_profile)",
        "where": "'and ' + Profile.filters: SQL written in code, values bound as :params",
        "profile.join": "as join",
        "profile.filters": "as where",
        "tested": "filter_source: Profile.filter_table, or 'chunks c ' and Profile.join",
        "key": "filter_source: Profile.filter_table's id column (written in code), or 'c.id'",
        "extra_sql": "Profile.columns: SQL written in code, joined with their names",
        "extra_names": "the names of Profile.columns, identifiers written in code",
        "args": "':query_vector, :pool, :model' and the ids subquery from Profile SQL",
        "table": "KeywordPlan.table: 'chunks_fts' or 'chunks_trigram', set by keyword_plan",
        "match": "':fts_query' or 'g.q', literals of build_statement",
        "gate": "'' or a literal subquery of build_statement",
        "source": "table, and the join with Profile SQL",
        "test": "where, or '' when rank tests Profile.filters in a CASE",
        "rank": "'bm25(' + table + ')' or 'bm25_candidate(' + table + ', :pool)', this in a "
        "CASE of Profile.filters when there are filters",
        "hits": "' + '.join of '(c.text like :like{i} escape ...)', i a range index",
        "i": "an index from range(len(plan.like_terms))",
        "vscore": "one of two literals of build_statement",
        "relevance": "chosen from literals by the validated fusion and keyword_norm options, "
        "or Profile.relevance (SQL written in code)",
        "keyword_score": "a value of a literal dict, keyed by the validated keyword_norm, or a"
        " literal of RRF_K",
        "vector_score": "a literal of build_statement, chosen by the validated fusion",
        "linear": "a literal of build_statement",
        "RRF_K": "module constant, an int",
        "RRF_K + 1.0": "module constant, a float",
        "conds": "literals of build_statement, and Profile.filters (SQL written in code)",
        "vector_of('c.id')": "Searcher._vector_of: a literal subquery on vectors, or"
        " VectorReader.vector_sql (quoted names and ints), of the literal 'c.id'",
        "cosine": "a literal of build_statement (around vector_of('c.id') for the backends"
        " without the extension), or 'null'",
        "cosine_join": "'' or a literal join of build_statement (on its kw_cos CTE)",
        "late": "Profile.late: SQL written in code (memory.ranking.SHOWN), joined with their names",
        "file": "a literal of build_statement: what group_by_file partitions by",
        "decay": "one of two literals of build_statement, chosen by the decay option",
        "columns": "_select_list(RESULT_COLUMNS): the result's names and SQL, written in code",
        "final": "one of two literals of build_statement, chosen by group_by_file, or that in"
        " a literal subquery when Profile.late has columns",
    },
    "search/searcher.py": {
        "profile.join": "Profile.join: SQL written in code (document_profile, memory_profile)",
        "profile.filters": "Profile.filters: SQL written in code, values bound as :params",
        "tested": "filter_source: Profile.filter_table (written in code) or chunks and join",
        "key": "filter_source: Profile.filter_table's id column (written in code), or 'c.id'",
        "marks": "', ' joined ':id{i}' placeholders, i a range index",
        "i": "an index from enumerate(ids), for the :id{i} placeholders",
        "vector_of('c.id')": "Searcher._vector_of: a literal subquery on vectors, or"
        " VectorReader.vector_sql (quoted names and ints), of the literal 'c.id'",
        "id_sql": "the literal 'c.id' given to vector_of",
    },
    "db/schema.py": {
        "insert": "_upgrade_from_1's own constant text",
        '_has_script("text")': "the test of the column text: code's SQL and the class"
        " TRIGRAM_SCRIPTS",
        '_has_script("new.text")': "the test of new.text: code's SQL and TRIGRAM_SCRIPTS",
        '_has_script("old.text")': "the test of old.text: code's SQL and TRIGRAM_SCRIPTS",
        "path": "a database's file name in an error message, not SQL",
        "table": "each name of FTS_TABLES, a module constant",
        "m[1]": "_triggers: a trigger's name in the module's own TABLES or FTS",
        "m[2]": "_triggers: the rest of that trigger's text in TABLES or FTS",
        "name": "_drop_stale_triggers: a name read from sqlite_schema, dropped only when it is"
        " one of TRIGGERS' keys (this module's own trigger names)",
    },
    "db/stats.py": {
        "table": "a table's name read from the file's schema, quoted as an identifier (its"
        " double quotes doubled)",
    },
    "db/vectors.py": {
        "master": "quoted(schema, 'sqlite_schema'): a quoted identifier",
        "self._name('rowids')": "quoted(): a quoted identifier",
        "self._name('blocks')": "quoted(): a quoted identifier",
        "self._name('vectors')": "quoted(): a quoted identifier",
        "self._name('codes')": "quoted(): a quoted identifier",
        "self._name('info')": "quoted(): a quoted identifier",
        "cols": "', p<int>' for each partition column, i a range index",
        "group": "SQL built here from quoted names and ints",
        "4 * dims": "an int (dims is len() of the query)",
        "dims": "an int (len() of the query)",
        "rowid_sql": "the literal 'c.id' from Searcher._vector_of",
        "conds": "' and b.p<int> = :<param>' with param names written in code",
        '" and ".join(conds)': "'p<int> is ?' placeholders",
        "BLOCK_GROUPS": "module constant, an int",
    },
}


def sql_interpolations(path: Path):
    """(line, expression) of every expression interpolated into SQL-looking text in path."""
    src = path.read_text()
    found = []

    def sql_literal(node):
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and bool(SQL_TEXT.search(node.value))
        )

    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.JoinedStr) and any(sql_literal(v) for v in node.values):
            found += [
                (node.lineno, ast.get_source_segment(src, v.value))
                for v in node.values
                if isinstance(v, ast.FormattedValue)
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
        ):
            found += [(node.lineno, ast.get_source_segment(src, node.func.value))]
            found += [(node.lineno, ast.get_source_segment(src, a)) for a in node.args]
            found += [(node.lineno, ast.get_source_segment(src, k.value)) for k in node.keywords]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
            sides = (node.left, node.right)
            if any(sql_literal(s) for s in sides):
                found += [
                    (node.lineno, ast.get_source_segment(src, s))
                    for s in sides
                    if not isinstance(s, (ast.Constant, ast.JoinedStr, ast.BinOp))
                ]
    return found


def test_sql_text_interpolates_only_reviewed_constants():
    unreviewed = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        reviewed = REVIEWED.get(name, {})
        for line, expr in sql_interpolations(path):
            if expr not in reviewed and not _is_format_of_a_constant(expr):
                unreviewed.append(f"hybridsql/{name}:{line}: {expr}")
    assert unreviewed == [], "review these interpolations into SQL:\n" + "\n".join(unreviewed)


def _is_format_of_a_constant(expr: str) -> bool:
    """A literal, or a module constant named in capitals (the receivers of .format())."""
    return bool(re.fullmatch(r"[A-Z_][A-Z0-9_]*|'[^']*'|\"[^\"]*\"|-?\d+", expr))


def test_the_static_review_sees_an_interpolated_value(tmp_path):
    """The scanner is not blind: a value spliced into SQL is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(conn, name, q):\n"
        "    conn.execute(f'select * from {name} where x = 1')\n"
        "    conn.execute('select * from t where x = ' + q)\n"
        "    conn.execute('delete from t where x = {}'.format(q))\n"
        "    conn.execute('delete from t where x = %s' % q)\n"
    )
    found = sorted(expr for _, expr in sql_interpolations(bad))
    assert found == ["'delete from t where x = {}'", "name", "q", "q", "q"]


def test_keyword_plans_only_name_the_two_fts5_tables():
    """build_statement interpolates KeywordPlan.table: whatever the text, it is one of two."""
    from hybridsql.search import keyword_plan

    for value in [*HOSTILE, "部署 deploy", "", "chunks_fts", "chunks_trigram'; --"]:
        for fts in (True, False):
            assert keyword_plan(value, fts=fts).table in (None, "chunks_fts", "chunks_trigram")


def test_search_options_that_reach_sql_text_are_validated():
    """fusion and keyword_norm choose SQL text; any other value is refused before."""
    for option in ("fusion", "keyword_norm", "mode", "backend"):
        with pytest.raises(HybridSQLError):
            SearchOptions(**{option: HOSTILE[0]}).check()
