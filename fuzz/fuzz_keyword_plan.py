"""atheris harness: a user's text through ``keyword_plan`` into a real FTS5 MATCH and LIKE.

``keyword_plan`` promises FTS5 syntax that cannot fail whatever the user types. Each input is
turned into text (any Unicode, lone surrogates included, spliced with FTS5 operators, quotes,
column filters, control characters, CJK and Thai), planned with and without FTS5 and prefixes,
and run against a small index with the real schema:

- the plan's table is one of the two FTS5 tables, and its MATCH never raises;
- every LIKE term, escaped and bound, never raises; at most MAX_TERMS of each;
- a plain word of the text that a document holds finds that document (words are OR-ed);
- a trigram plan's terms are pieces of the text, three characters or more, and each one that a
  document holds finds that document (terms are OR-ed);
- the snippet and highlight terms never raise.

Run it: see fuzz/README.md.
"""

import re
import sys

import atheris

with atheris.instrument_imports(include=["hybridsql"]):
    from hybridsql.db.extension import connect
    from hybridsql.db.schema import ensure_schema
    from hybridsql.search import (
        MAX_TERMS,
        _like_pattern,
        highlight_terms,
        keyword_plan,
        make_snippet,
    )

# fmt: off
FRAGMENTS = [
    " AND ", " OR ", " NOT ", "NEAR(", ")", "(", '"', '""', "'", "*", "^", ":", "-", "+",
    "{", "}", "text:", "{text}:", "NEAR/2", " ", "\t", "\n", "\x00", "\x1b[31m", "\\",
    "%", "_", "部署", "服务", "デプロイ", "배포", "ERR_CONN_RESET", "deploy", "the", "a",
    "\ufeff", "\u202e", "\udcff", "\ud800", "🚀", "é", "e\u0301", "ﬁ", "Ⅻ", "١٢٣",
    "回滚脚本", "的防守", "ปรับใช้", "ล้มเหลว", "ພາສາ", "、", "？", "ｶﾀｶﾅ",
]
# fmt: on

DOCUMENTS = [
    "deploy the billing service on Friday",
    "部署 服务 在 周五 deploy",
    "ERR_CONN_RESET when the proxy drops idle connections",
    "tabs vs spaces: the team indents python with four spaces",
    "部署流程的回滚脚本和黑豹队的防守",
    "ถ้าการปรับใช้ล้มเหลว ให้รันสคริปต์ย้อนกลับ",
]

conn = connect(":memory:", backend="extension")
ensure_schema(conn)
with conn:
    for text in DOCUMENTS:
        conn.execute(
            "insert into chunks(kind, path, text, created_at) values ('document', 'a.md', ?, 0)",
            (text,),
        )
MATCH = {
    table: f"select rowid from {table} where {table} match ?"
    for table in ("chunks_fts", "chunks_trigram")
}
LIKE = "select count(*) from chunks where text like ? escape '\\'"


def make_text(fdp) -> str:
    """Random Unicode spliced with fragments, each chosen by the input."""
    parts = []
    for _ in range(fdp.ConsumeIntInRange(0, 12)):
        if fdp.ConsumeBool():
            parts.append(FRAGMENTS[fdp.ConsumeIntInRange(0, len(FRAGMENTS) - 1)])
        else:
            parts.append(fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40)))
    return "".join(parts) + fdp.ConsumeUnicode(fdp.remaining_bytes())


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    fts, prefix = fdp.ConsumeBool(), fdp.ConsumeBool()
    text = make_text(fdp)
    plan = keyword_plan(text, fts=fts, prefix=prefix)
    if not fts:
        assert plan.table is None and plan.match is None, plan
    elif plan.match is not None:
        assert plan.table in MATCH, plan
        found = {r[0] for r in conn.execute(MATCH[plan.table], (plan.match,))}
        if plan.table == "chunks_fts" and "deploy" in text.split():
            assert 1 in found, (text, plan)
        if plan.table == "chunks_trigram":
            terms = [t.replace('""', '"') for t in re.findall(r'"((?:[^"]|"")*)"', plan.match)]
            assert len(terms) <= MAX_TERMS and all(len(t) >= 3 and t in text for t in terms)
            for number, document in enumerate(DOCUMENTS, start=1):
                if number in (5, 6) and any(t in document for t in terms):
                    assert number in found, (text, plan)
    assert len(plan.like_terms) <= MAX_TERMS
    for term in plan.like_terms:
        conn.execute(LIKE, (_like_pattern(term),)).fetchall()
    make_snippet(DOCUMENTS[0], highlight_terms(text))


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
