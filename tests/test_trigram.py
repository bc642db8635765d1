"""The trigram tables hold only the chunks with text in TRIGRAM_SCRIPTS (CJK, Thai, Lao, Myanmar,
Khmer; schema 6): the GLOB of their views and triggers is the keyword plan's class, character for
character; a query sent to them matches what a scan of the chunks matches, ranked by bm25 as
computed here from the texts; triggers keep them in step through every write, from any client;
an index of schema 4 (trigram tables over every chunk) or 5 (over the chunks with CJK text)
upgrades and answers as a new one, and one of schema 5 is searched read-only as it is."""

import gzip
import math
import os
import random
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import SHELL, check_fts, letter_counts, run_sqlite3

import hybridsql
from hybridsql.db import schema
from hybridsql.db.schema import FTS_TABLES, SCHEMA_VERSION, TRIGRAM_SCRIPTS, schema_version
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore
from hybridsql.search import MAX_TERMS, SearchOptions, keyword_plan

FOLDER = os.path.join(os.path.dirname(__file__), "data", "cjk")
CLASS = TRIGRAM_SCRIPTS
HAS_SCRIPT = re.compile(f"[{CLASS}]")
RANGES = [(ord(CLASS[i]), ord(CLASS[i + 2])) for i in range(0, len(CLASS), 3)]
# Schema 5's class: CJK alone.
CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\u3000-\u303f"


def fold(text: str) -> str:
    """Text as FTS5's trigram tokenizer compares it (case_sensitive 0): each character folded
    to one lower-case character where it has one."""
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def terms_of(match: str) -> list:
    """The quoted terms of an FTS5 query that keyword_plan made (OR-ed)."""
    return [t.replace('""', '"') for t in re.findall(r'"((?:[^"]|"")*)"', match)]


def scan(conn, kind: str, terms: list) -> set:
    """The chunks of ``kind`` with text in the class that hold any term, by a scan of chunks
    (the oracle)."""
    rows = conn.execute("select id, text from chunks where kind = ?", (kind,)).fetchall()
    return {
        i
        for i, text in rows
        if HAS_SCRIPT.search(text) and any(fold(t) in fold(text) for t in terms)
    }


def occurrences(term: str, text: str) -> int:
    """How many times ``term`` is in ``text``, overlapping ones too, folded."""
    term, text = fold(term), fold(text)
    return sum(text.startswith(term, k) for k in range(len(text) - len(term) + 1))


def bm25(conn, kind: str, terms: list) -> dict:
    """FTS5's bm25() of an OR of ``terms`` (each of three or more characters) over the trigram
    table, computed from the chunks' texts (the oracle): the table holds a row's every three
    characters as a token, so a row of n characters is n - 2 tokens long, and a term is in a
    row as many times as its characters are (as a phrase of its trigrams); idf is
    log((N - n + 0.5) / (n + 0.5)), or 1e-6 where that is not above 0; k1 1.2, b 0.75."""
    rows = conn.execute("select id, text from chunks where kind = ?", (kind,)).fetchall()
    rows = [(i, text) for i, text in rows if HAS_SCRIPT.search(text)]
    length = {i: max(0, len(text) - 2) for i, text in rows}
    average = sum(length.values()) / len(rows)
    scores: dict = {}
    for term in dict.fromkeys(terms):
        counts = {i: occurrences(term, text) for i, text in rows}
        hits = sum(1 for n in counts.values() if n)
        idf = math.log((len(rows) - hits + 0.5) / (hits + 0.5))
        idf = idf if idf > 0 else 1e-6
        for i, n in counts.items():
            if n:
                norm = 1.2 * (0.25 + 0.75 * length[i] / average)
                scores[i] = scores.get(i, 0.0) - idf * n * 2.2 / (n + norm)
    return scores


def trigram_ids(conn, kind: str) -> set:
    """The rows a trigram table holds."""
    table = FTS_TABLES[kind][1]
    return {i for (i,) in conn.execute(f"select id from {table}_docsize")}


def script_ids(conn, kind: str) -> set:
    rows = conn.execute("select id, text from chunks where kind = ?", (kind,)).fetchall()
    return {i for i, text in rows if HAS_SCRIPT.search(text)}


def check_in_step(conn):
    """Each trigram table holds exactly its kind's chunks with text in the class, and FTS5
    agrees."""
    check_fts(conn)
    for kind in FTS_TABLES:
        assert trigram_ids(conn, kind) == script_ids(conn, kind)


class Letters:
    """A provider whose vector is a text's letter counts and a 1 (a text of CJK or Thai alone
    has no letter); records every text it is asked for."""

    model_id, dims = "letters", 27

    def __init__(self):
        self.asked = []

    def embed(self, texts):
        self.asked += texts
        return np.array([letter_counts(t) + [1.0] for t in texts], dtype=np.float32)


@pytest.fixture(scope="module")
def cjk_index(tmp_path_factory):
    """tests/data/cjk (Chinese, Japanese, Korean, Thai and English notes, some mixed) indexed,
    and a few memories, with and without CJK or Thai."""
    path = str(tmp_path_factory.mktemp("cjk") / "cjk.db")
    with HybridIndex(path, embedder=Letters()) as idx:
        idx.index_folder(FOLDER)
        store = MemoryStore(idx)
        for text in MEMORIES:
            store.add(text, "asia", "semantic")
    return path


MEMORIES = [
    "王磊负责会话缓存的告警阈值调整，十一月底完成",
    "Wang Lei owns the session cache alert threshold, due end of November",
    "オンコールの交代は毎週月曜日の朝十時",
    "배포는 금요일 오후에 하지 않는다",
    "Deploys never go out on Friday afternoons",
    "ผู้ที่อยู่เวรสัปดาห์นี้คือสมชาย ติดต่อทางโทรศัพท์เท่านั้น",
]


def test_the_glob_is_the_keyword_plans_class(cjk_index):
    """Every GLOB in the schema has the class TRIGRAM_SCRIPTS, and SQLite's GLOB and Python's
    regular expression agree on every code point (ranges' ends, the characters beside them,
    fullwidth and halfwidth forms, Thai's vowels and tone marks), in apsw and in the stock
    sqlite3 shell."""
    conn = hybridsql.connect(cjk_index)
    sql = " ".join(
        s for (s,) in conn.execute("select sql from sqlite_schema where sql like '%glob%'")
    )
    classes = re.findall(r"glob '\*\[([^]]*)\]\*'", sql)
    assert len(classes) == 10 and set(classes) == {CLASS}
    # glob's class as the schema has it, over every code point but the surrogates
    sweep = f"""with recursive n(c) as (select 1 union all select c + 1 from n where c < 1114111)
select c from n where (c < 55296 or c > 57343) and char(c) glob '*[{CLASS}]*'"""
    in_sqlite = [c for (c,) in conn.execute(sweep)]
    in_python = [c for lo, hi in RANGES for c in range(lo, hi + 1)]
    assert in_sqlite == sorted(set(in_python))
    edges = [c for lo, hi in RANGES for c in (lo - 1, lo, hi, hi + 1)]
    forms = [ord(c) for c in "ＡｚＺ０９！～ｶﾞ￥　、。「」ก่ำ๏ລ່ကျ္ក់"] + [0x20000, 0x3400, 0x1100]
    probe = [chr(c) for c in edges + forms]
    expected = [bool(HAS_SCRIPT.search(f"a{c}b")) for c in probe]
    assert expected[:4] == [False, True, True, False]  # Thai's range: U+0DFF out, U+0E00 in
    got = [
        bool(conn.execute(f"select ? glob '*[{CLASS}]*'", (f"a{c}b",)).fetchone()[0]) for c in probe
    ]
    assert got == expected
    select = " union all ".join(f"select 'a{c}b' glob '*[{CLASS}]*'" for c in probe)
    shell = subprocess.run(
        [SHELL, ":memory:", select], capture_output=True, text=True, timeout=60, check=True
    )
    assert [line == "1" for line in shell.stdout.split()] == expected
    conn.close()


# Values that the shortcut before the GLOB must answer as the GLOB does: ASCII, NUL before or
# after CJK, lone and stray lead and continuation bytes, overlong and too long sequences (SQLite
# reads C3 80 80 as U+3000), a lead byte closing the text, surrogates, U+FFFD and U+FFFE.
EDGE_BYTES = [
    b"",
    b"plain ascii",
    b"a\x00\xe4\xb8\xad",
    b"\xe4\xb8\xad\x00a",
    b"\xe4\xb8\xad",
    b"\xe4",
    b"\xe4a",
    b"a\xe4",
    b"\xb8\xad",
    b"\xc3\x80\x80",
    b"\xc3\x80",
    b"\xf0\x80\xb8\xad",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xef\xbf\xbd",
    b"\xef\xbf\xbe",
    b"\xef\xbc\xa1",
    "caf\u00e9 \u2019quoted\u2019 \u2014 \u03b1".encode(),
    "\uac00 Hangul".encode(),
    "\u0e01\u0e48 Thai".encode(),
    b"\xe0\xb8",
    b"\xff\xfe",
]


def test_the_shortcut_before_the_glob_answers_as_the_glob_does(tmp_path):
    """The schema's test of the class skips the GLOB for text whose characters are its bytes; for every
    value, text or blob, well-formed UTF-8 or not, it answers what the GLOB alone answers, in
    apsw and in the stock sqlite3 shell (the triggers' clients)."""
    rng = random.Random(7)
    pool = [b"a", b" ", b"\x00", b"\x80", b"\xad", b"\xb8", b"\xbf", b"\xc3", b"\xe3"]
    pool += [b"\xe4", b"\xef", b"\xf0", b"\xff", "\u4e2d".encode(), "\u00e9".encode()]
    values = EDGE_BYTES + [
        b"".join(rng.choice(pool) for _ in range(rng.randrange(1, 8))) for _ in range(3000)
    ]
    values += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))) for _ in range(3000)]
    has_cjk = schema._has_script("x")
    glob = f"x glob '*[{CLASS}]*'"
    assert has_cjk.endswith(f" and {glob})")
    path = str(tmp_path / "values.db")
    conn = hybridsql.connect(path)
    conn.execute("create table t(n integer primary key, b blob)")
    conn.executemany("insert into t(b) values (?)", [(v,) for v in values])
    # each value as text (its bytes read as UTF-8) and as a blob
    compare = (
        f"select {glob}, {has_cjk} from (select n, cast(b as text) x from t"
        " union all select -n, b from t) order by n"
    )
    rows = conn.execute(compare).fetchall()
    conn.close()
    assert len(rows) == 2 * len(values)
    assert [r[0] for r in rows] == [r[1] for r in rows]
    assert 0 < sum(r[0] for r in rows) < len(rows)  # the sample holds both answers
    if SHELL is not None:
        shell = run_sqlite3(path, compare)
        assert shell.returncode == 0, shell.stderr
        answers = [tuple(int(a) for a in line.split("|")) for line in shell.stdout.split()]
        assert answers == rows


def queries(conn, rng: random.Random) -> list:
    """Generated queries: substrings of 1 to 8 characters of the chunks' runs in the class (CJK
    and Thai; and ones no chunk has), alone and with words of the chunks; words alone with a CJK
    punctuation mark (so that they go to the trigram table); fullwidth forms; words of mixed
    case."""
    texts = [t for (t,) in conn.execute("select text from chunks order by id")]
    runs = [r for t in texts for r in re.findall(f"[{CLASS}]+", t)]
    words = [w for t in texts for w in re.findall(r"[A-Za-z][A-Za-z-]{2,}", t)]
    out = []
    for _ in range(300):
        run = rng.choice(runs)
        size = rng.randint(1, 8)
        start = rng.randrange(max(1, len(run) - size + 1))
        cjk = run[start : start + size]
        shape = rng.randrange(6)
        if shape == 0:
            out.append(cjk)
        elif shape == 1:
            out.append(f"{cjk} {rng.choice(words)}")
        elif shape == 2:
            out.append(f"{rng.choice(words).upper()} {cjk} {rng.choice(words)}")
        elif shape == 3:
            out.append(f"{rng.choice(words)}、")
        elif shape == 4:
            out.append("".join(rng.sample("数据库迁移回滚ログイン배포캐시ปรับใช้", 4)))
        else:
            out.append(f"{cjk[:2]} {rng.choice(words)}")
    return out + [
        "ＡＰＩ",
        "ａｐｉの応答",
        "ｶﾀｶﾅ",
        "（注）",
        "API 응답",
        "登录 rollback",
        "登录 zebra",
        "สคริปต์ย้อนกลับ rollback",
    ]


@pytest.mark.parametrize("kind", ["document", "memory"])
def test_the_trigram_table_matches_and_ranks_what_a_scan_of_the_chunks_finds(cjk_index, kind):
    """A plan's terms are pieces of the query, three characters or more; the table matches the
    chunks with text in the class that hold any of them, and bm25() scores them as the oracle
    computes it from their texts."""
    conn = hybridsql.connect(cjk_index)
    asked = 0
    for query in queries(conn, random.Random(f"trigram {kind}")):
        plan = keyword_plan(query, tables=FTS_TABLES[kind])
        if plan.table != FTS_TABLES[kind][1] or plan.match is None:
            continue  # a run under three characters alone: LIKE
        asked += 1
        terms = terms_of(plan.match)
        assert all(len(t) >= 3 and t in query for t in terms), query
        assert len(terms) == len(set(terms)) <= MAX_TERMS
        scores = dict(
            conn.execute(
                f"select rowid, bm25({plan.table}) from {plan.table} where {plan.table} match ?",
                (plan.match,),
            ).fetchall()
        )
        assert set(scores) == scan(conn, kind, terms), query
        want = bm25(conn, kind, terms)
        assert set(want) == set(scores), query
        assert [scores[i] for i in want] == pytest.approx(list(want.values()), rel=1e-9), query
    assert asked > (200 if kind == "document" else 150)
    conn.close()


def test_the_matches_are_not_all_empty(cjk_index):
    """The oracle compares real matches: CJK queries find CJK chunks of each language."""
    with HybridIndex(cjk_index, readonly=True) as idx:
        for query, path in [
            ("数据库迁移", "zh/部署流程.md"),
            ("ロールバック", "ja/オンボーディング.md"),
            ("롤백 스크립트", "ko/배포-체크리스트.md"),
            ("ＡＰＩの応答時間", "ja/検索チューニング.md"),
            ("回滚 dry-run", "mixed/release-notes.md"),
        ]:
            assert path in [r.path for r in idx.search(query, mode="keyword")], query


def test_a_short_cjk_run_with_words_matches_the_words_in_cjk_chunks_then_anywhere(cjk_index):
    """登录 (two characters) cannot use trigrams: the words are matched over the chunks with
    text in the class; where none has them, LIKE finds any chunk with 登录 or one of the
    words."""
    with HybridIndex(cjk_index, readonly=True) as idx:
        # en/login-incident.md has "sessions" too, but no CJK
        found = idx.search("登录 sessions", mode="keyword")
        assert [r.path for r in found] == ["mixed/release-notes.md"]
        assert found.keyword_tier == "fts"
        found = idx.search("登录 outage", mode="keyword")
        assert "en/login-incident.md" in [r.path for r in found]
        assert found.keyword_tier == "like"


@pytest.mark.parametrize(
    "query, table, match",
    [
        ("数据库迁移 rollback", "chunks_trigram", '"数据库" OR "据库迁" OR "库迁移" OR "rollback"'),
        ("登录 sessions", "chunks_trigram", '"sessions"'),
        ("ＡＰＩ", "chunks_trigram", '"ＡＰＩ"'),
        ("ｶﾀｶﾅ", "chunks_trigram", '"ｶﾀｶ" OR "ﾀｶﾅ"'),
        ("ปรับใช้", "chunks_trigram", '"ปรั" OR "รับ" OR "ับใ" OR "บใช" OR "ใช้"'),
        (
            "ย้อนกลับ rollback",
            "chunks_trigram",
            '"ย้อ" OR "้อน" OR "อนก" OR "นกล" OR "กลั" OR "ลับ" OR "rollback"',
        ),
        ("。，、「」", "chunks_trigram", '"。，、「」"'),
        ("「rollback」", "chunks_fts", '"rollback"'),
        ("sessions、outage。", "chunks_fts", '"sessions" OR "outage"'),
    ],
)
def test_cjk_letters_send_a_query_to_the_trigram_table_cjk_punctuation_alone_does_not(
    query, table, match
):
    plan = keyword_plan(query)
    assert (plan.table, plan.match) == (table, match)


def test_words_in_cjk_quotation_marks_are_searched_in_every_chunk(cjk_index):
    with HybridIndex(cjk_index, readonly=True) as idx:
        for query in ["「outage」", "outage。"]:
            found = idx.search(query, mode="keyword")
            assert [r.path for r in found] == ["en/login-incident.md"]
            assert found.keyword_tier == "fts"


def write(conn, sql: str, *args):
    conn.execute(sql, args)
    check_in_step(conn)


def test_triggers_keep_the_trigram_tables_in_step(cjk_index, tmp_path):
    """Inserts, updates that add or remove CJK or Thai (Lao, Myanmar, Khmer) or change a chunk's
    kind, and deletes, from apsw; FTS5's integrity-check passes after each."""
    path = str(tmp_path / "w.db")
    shutil.copy(cjk_index, path)
    conn = hybridsql.connect(path)
    check_in_step(conn)
    insert = (
        "insert into chunks(kind, file_id, path, text, created_at)"
        " values (?, (select min(id) from files), 'x.md', ?, 0)"
    )
    write(conn, insert, "document", "plain English about rollbacks")
    english = conn.last_insert_rowid()
    write(conn, insert, "document", "回滚 in Chinese")
    chinese = conn.last_insert_rowid()
    write(conn, "update chunks set text = text || ' 部署' where id = ?", english)
    write(conn, "update chunks set text = 'no CJK any more' where id = ?", chinese)
    write(conn, "update chunks set text = 'still none' where id = ?", chinese)
    write(conn, "update chunks set text = '全角ＡＢＣ' where id = ?", chinese)
    write(conn, insert, "document", "ทดสอบการปรับใช้ before release")
    thai = conn.last_insert_rowid()
    write(conn, "update chunks set text = 'Thai gone' where id = ?", thai)
    write(conn, "update chunks set text = 'ພາສາລາວ ແລະ မြန်မာ ហើយ ខ្មែរ' where id = ?", thai)
    write(conn, "update chunks set kind = 'memory', file_id = null where id = ?", english)
    write(conn, "update chunks set kind = 'document' where id = ?", english)
    write(conn, "delete from chunks where id in (?, ?, ?)", english, chinese, thai)
    write(conn, "delete from files where path in ('mixed/glossary.md', 'en/deploy.md')")
    write(conn, "delete from chunks where path = 'en/search-tuning.md'")
    write(conn, "delete from chunks where kind = 'memory'")
    conn.close()


@pytest.mark.skipif(SHELL is None, reason="no sqlite3 shell")
def test_the_stock_shell_keeps_them_in_step(cjk_index, tmp_path):
    """The triggers are SQL: the stock sqlite3 shell's writes keep the tables in step too."""
    path = str(tmp_path / "s.db")
    shutil.copy(cjk_index, path)
    statements = [
        "insert into chunks(kind, path, text, created_at) values ('memory', '', '캐시 증설', 0)",
        "update chunks set text = text || '、' where kind = 'document' and text not glob '*[가-힯]*'",
        "update chunks set text = 'English only' where path glob 'zh/*'",
        "delete from chunks where path glob 'ko/*'",
    ]
    done = run_sqlite3(path, *statements)
    assert (done.returncode, done.stderr) == (0, "")
    conn = hybridsql.connect(path)
    check_in_step(conn)
    assert (
        len(trigram_ids(conn, "document"))
        == conn.execute(
            "select count(*) from chunks where kind = 'document' and path not glob 'zh/*'"
        ).fetchone()[0]
    )
    conn.close()


# Schema 4's trigram tables, views and triggers, as its code made them.
SCHEMA4 = """
create view document_chunks as select id, text from chunks where kind = 'document';
create virtual table chunks_trigram using fts5(
  text, content='document_chunks', content_rowid='id', tokenize='trigram'
);
create virtual table memories_trigram using fts5(
  text, content='memory_chunks', content_rowid='id', tokenize='trigram'
);
create trigger chunks_fts_insert after insert on chunks begin
  insert into chunks_fts(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into chunks_trigram(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into memories_fts(rowid, text) select new.id, new.text where new.kind = 'memory';
  insert into memories_trigram(rowid, text) select new.id, new.text where new.kind = 'memory';
end;
create trigger chunks_fts_delete after delete on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into chunks_trigram(chunks_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into memories_fts(memories_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into memories_trigram(memories_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
end;
create trigger chunks_fts_update after update of text, kind on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into chunks_trigram(chunks_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into memories_fts(memories_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into memories_trigram(memories_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into chunks_fts(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into chunks_trigram(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into memories_fts(rowid, text) select new.id, new.text where new.kind = 'memory';
  insert into memories_trigram(rowid, text) select new.id, new.text where new.kind = 'memory';
end;
insert into chunks_trigram(chunks_trigram) values ('rebuild');
insert into memories_trigram(memories_trigram) values ('rebuild');
update meta set value = 4 where key = 'schema_version';
"""


def _has_cjk(text: str) -> str:
    """Schema 5's test of a CJK character in ``text``, as its code wrote it."""
    one_byte_each = f"length(cast({text} as text)) = length(cast({text} as blob))"
    return f"(not {one_byte_each} and {text} glob '*[{CJK}]*')"


# Schema 5's trigram tables, views and triggers, as its code made them: the chunks with CJK text.
SCHEMA5 = f"""
create view document_cjk_chunks as
  select id, text from chunks where kind = 'document' and {_has_cjk("text")};
create view memory_cjk_chunks as
  select id, text from chunks where kind = 'memory' and {_has_cjk("text")};
create virtual table chunks_trigram using fts5(
  text, content='document_cjk_chunks', content_rowid='id', tokenize='trigram'
);
create virtual table memories_trigram using fts5(
  text, content='memory_cjk_chunks', content_rowid='id', tokenize='trigram'
);
create trigger chunks_fts_insert after insert on chunks begin
  insert into chunks_fts(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into chunks_trigram(rowid, text)
    select new.id, new.text where new.kind = 'document' and {_has_cjk("new.text")};
  insert into memories_fts(rowid, text) select new.id, new.text where new.kind = 'memory';
  insert into memories_trigram(rowid, text)
    select new.id, new.text where new.kind = 'memory' and {_has_cjk("new.text")};
end;
create trigger chunks_fts_delete after delete on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into chunks_trigram(chunks_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document' and {_has_cjk("old.text")};
  insert into memories_fts(memories_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into memories_trigram(memories_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory' and {_has_cjk("old.text")};
end;
create trigger chunks_fts_update after update of text, kind on chunks begin
  insert into chunks_fts(chunks_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document';
  insert into chunks_trigram(chunks_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'document' and {_has_cjk("old.text")};
  insert into memories_fts(memories_fts, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory';
  insert into memories_trigram(memories_trigram, rowid, text)
    select 'delete', old.id, old.text where old.kind = 'memory' and {_has_cjk("old.text")};
  insert into chunks_fts(rowid, text) select new.id, new.text where new.kind = 'document';
  insert into chunks_trigram(rowid, text)
    select new.id, new.text where new.kind = 'document' and {_has_cjk("new.text")};
  insert into memories_fts(rowid, text) select new.id, new.text where new.kind = 'memory';
  insert into memories_trigram(rowid, text)
    select new.id, new.text where new.kind = 'memory' and {_has_cjk("new.text")};
end;
insert into chunks_trigram(chunks_trigram) values ('rebuild');
insert into memories_trigram(memories_trigram) values ('rebuild');
update meta set value = 5 where key = 'schema_version';
"""

CJK_QUERIES = [
    "数据库迁移",
    "数据库",
    "回滚 rollback",
    "rollback、",
    "ロールバック",
    "キャッシュ",
    "로그인 실패",
    "캐시 서버",
    "登录 sessions",
    "缓存",
    "สคริปต์ย้อนกลับ",
    "ผู้ที่อยู่เวร",
]


def answers(idx):
    """Keyword searches of documents and of memories (ids and scores), and the trigram tables'
    own matches with their bm25."""
    # scores decay with the clock
    store = MemoryStore(idx, clock=lambda: 1795219200.0, options=SearchOptions(min_score=0))
    out = []
    for query in CJK_QUERIES:
        found = idx.search(query, mode="keyword", keyword_norm="saturation", min_score=0)
        out.append([(r.id, r.score) for r in found])
        found = store.search(query, mode="keyword", reinforce=False)
        out.append([(h.memory.id, h.score) for h in found])
        match = keyword_plan(query).match
        for table in (tables[1] for tables in FTS_TABLES.values() if match):
            sql = f"select rowid, bm25({table}) from {table} where {table} match ? order by 1"
            out.append([tuple(row) for row in idx.conn.execute(sql, (match,))])
    return out


def made_older(cjk_index, path: str, script: str) -> list:
    """A copy of the index at ``path`` with an older schema's trigram tables (``script``);
    returns its vectors."""
    shutil.copy(cjk_index, path)
    conn = hybridsql.connect(path)
    with conn:
        conn.execute(
            "drop trigger chunks_fts_insert; drop trigger chunks_fts_delete;"
            " drop trigger chunks_fts_update; drop table chunks_trigram;"
            " drop table memories_trigram; drop view document_trigram_chunks;"
            " drop view memory_trigram_chunks;"
        )
        conn.execute(script)
    vectors = conn.execute("select chunk_id, vector from vectors order by 1").fetchall()
    conn.close()
    return vectors


def check_upgraded(path: str, cjk_index: str, vectors: list) -> None:
    """A writing open upgrades the index at ``path``: its vectors kept, nothing embedded, its
    tables in step, its schema and its answers those of an index made by this version; a
    second open changes nothing."""
    provider = Letters()
    with HybridIndex(path, embedder=provider) as idx, HybridIndex(cjk_index, readonly=True) as new:
        assert schema_version(idx.conn) == SCHEMA_VERSION == 7
        assert idx.conn.execute("select chunk_id, vector from vectors order by 1").fetchall() == (
            vectors
        )
        assert len(vectors) == 28 and provider.asked == []  # 22 chunks, 6 memories
        check_in_step(idx.conn)
        schema = "select type, name, sql from sqlite_schema where name not glob '*_trigram_*'"
        assert sorted(idx.conn.execute(schema)) == sorted(new.conn.execute(schema))
        got, want = answers(idx), answers(new)
        assert got == want and sum(len(a) for a in got) > 40
    with HybridIndex(path, embedder=provider) as idx:  # a second open changes nothing
        assert schema_version(idx.conn) == SCHEMA_VERSION
        idx.conn.execute("delete from chunks where path glob 'ja/*'")
        check_in_step(idx.conn)


def test_a_schema_4_index_upgrades_and_answers_as_a_new_one(cjk_index, tmp_path):
    path = str(tmp_path / "schema4.db")
    vectors = made_older(cjk_index, path, SCHEMA4)
    conn = hybridsql.connect(path)
    everything = {i for (i,) in conn.execute("select id from chunks where kind = 'document'")}
    assert trigram_ids(conn, "document") == everything != script_ids(conn, "document")
    conn.close()
    with pytest.raises(hybridsql.DatabaseError, match=re.escape("older hybridsql (schema 4)")):
        HybridIndex(path, readonly=True)
    check_upgraded(path, cjk_index, vectors)


def test_a_schema_5_index_is_searched_read_only_then_upgrades(cjk_index, tmp_path):
    """Schema 5's trigram tables hold the chunks with CJK text, not the Thai ones. Opened
    read-only, it answers as it is: CJK by its trigrams, Thai (which its trigram table lacks)
    by LIKE over every chunk; a writing open makes the tables again over the new class."""
    path = str(tmp_path / "schema5.db")
    vectors = made_older(cjk_index, path, SCHEMA5)
    conn = hybridsql.connect(path)
    cjk = {i for i in script_ids(conn, "document") if re.search(f"[{CJK}]", chunk(conn, i))}
    assert trigram_ids(conn, "document") == cjk != script_ids(conn, "document")
    conn.close()
    with HybridIndex(path, readonly=True, embedder="none") as idx:
        assert schema_version(idx.conn) == 5
        found = idx.search("数据库迁移 回滚", mode="keyword")
        assert found.keyword_tier == "fts" and found[0].path == "zh/部署流程.md"
        found = idx.search("สคริปต์ย้อนกลับ", mode="keyword")
        assert found.keyword_tier == "like" and found[0].path == "th/การปรับใช้.md"
    check_upgraded(path, cjk_index, vectors)
    with HybridIndex(path, readonly=True, embedder="none") as idx:
        found = idx.search("สคริปต์ย้อนกลับ", mode="keyword")
        assert found.keyword_tier == "fts" and found[0].path == "th/การปรับใช้.md"


def chunk(conn, i: int) -> str:
    return conn.execute("select text from chunks where id = ?", (i,)).fetchone()[0]


def test_an_index_made_by_schema_5s_code_keeps_its_data_and_gains_trigram_search(tmp_path):
    """tests/data/schema5.db.gz, made by main's code of schema 5 (see tests/data/README.md), not
    rebuilt here from its SQL: read-only, it searches as it is (Thai, which its trigram table
    lacks, by LIKE); a writing open upgrades it, its files, chunks, vectors and memories kept and
    nothing embedded, and then Thai is found by the trigram table, as in an index made now."""
    path = str(tmp_path / "schema5.db")
    made = os.path.join(os.path.dirname(FOLDER), "schema5.db.gz")
    with gzip.open(made) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    rows = {
        "files": "select * from files order by 1",
        "chunks": "select * from chunks order by 1",
        "vectors": "select chunk_id, vector from vectors order by 1",
        "memories": "select * from memories order by 1",
    }
    conn = hybridsql.connect(path)
    before = {name: conn.execute(sql).fetchall() for name, sql in rows.items()}
    assert schema_version(conn) == 5 and len(before["vectors"]) == len(before["chunks"]) == 28
    assert len(before["memories"]) == 3
    assert trigram_ids(conn, "document") != script_ids(conn, "document")  # no Thai there
    conn.close()
    thai = "สคริปต์ย้อนกลับ"
    with HybridIndex(path, readonly=True, embedder="none") as idx:
        found = idx.search("数据库迁移 回滚", mode="keyword")
        assert found.keyword_tier == "fts" and found[0].path == "zh/部署流程.md"
        found = idx.search(thai, mode="keyword")
        assert found.keyword_tier == "like" and found[0].path == "th/การปรับใช้.md"
    with HybridIndex(path, embedder="local") as idx:  # the model it was made with
        assert schema_version(idx.conn) == SCHEMA_VERSION
        # every row as it was: no chunk made again, no vector added or embedded again
        assert {name: idx.conn.execute(sql).fetchall() for name, sql in rows.items()} == before
        check_in_step(idx.conn)
    fresh = str(tmp_path / "fresh.db")
    with HybridIndex(fresh, embedder="local") as new:  # which cuts chunks to its window
        new.index_folder(FOLDER)
    with HybridIndex(path, readonly=True, embedder="none") as idx:
        with HybridIndex(fresh, readonly=True, embedder="none") as new:
            found = idx.search(thai, mode="keyword")
            assert found.keyword_tier == "fts" and found[0].path == "th/การปรับใช้.md"
            for query in CJK_QUERIES:
                got = idx.search(query, mode="keyword", min_score=0, decay=False)
                want = new.search(query, mode="keyword", min_score=0, decay=False)
                assert [(r.path, r.score) for r in got] == [(r.path, r.score) for r in want]
        hits = MemoryStore(idx).search("ผู้ที่อยู่เวร", mode="keyword", reinforce=False)
        assert hits[0].memory.content.startswith("ผู้ที่อยู่เวรสัปดาห์นี้")
