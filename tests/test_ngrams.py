"""Keyword search in scripts written without spaces (issue 41, item 4): a query in Chinese,
Japanese or Thai is searched by its pieces' trigrams, OR-ed on the trigram table and ranked by
bm25, so a question finds the paragraph that answers it though it is not written there word for
word. The plans for pieces of 1, 2, 3 and more characters, mixed scripts and long text; what a
snippet marks; XQuAD's Chinese and Thai (tests/data/xquad) through every backend."""

import json
import os
import re
import unicodedata
import zlib

import numpy as np
import pytest

from hybridsql.db.schema import TRIGRAM_SCRIPTS
from hybridsql.indexing.index import HybridIndex
from hybridsql.search import MAX_TERMS, highlight_terms, keyword_plan, make_snippet
from hybridsql.search.keywords import _script_piece, script_terms

DATA = os.path.join(os.path.dirname(__file__), "data", "xquad")
BACKENDS = ["extension", "numpy", "python"]
NOW = "2026-11-30"


def trigrams(text: str) -> list:
    return [text[i : i + 3] for i in range(len(text) - 2)]


def ors(terms) -> str:
    return " OR ".join(f'"{t}"' for t in terms)


# -- plans --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, match, like_terms",
    [
        ("缓", None, ["缓"]),  # one character: no trigram holds it, LIKE alone
        ("缓存", None, ["缓存"]),  # two
        ("数据库", '"数据库"', ["数据库"]),  # three: one trigram
        ("数据库迁移", ors(trigrams("数据库迁移")), trigrams("数据库迁移")),
        # punctuation and spaces part pieces: no trigram spans them
        ("数据，库迁", None, ["数据", "库迁"]),
        ("数据库？ 迁移", '"数据库"', ["数据库", "迁移"]),
        # a piece of 3 next to one of 2: the trigram, and the pair for LIKE
        ("回滚脚本 数据", ors(["回滚脚", "滚脚本"]), ["回滚脚", "滚脚本", "数据"]),
        # Thai: vowels and tone marks are marks (not \w), and stay in their piece
        ("ย้อนกลับ", ors(trigrams("ย้อนกลับ")), trigrams("ย้อนกลับ")),
        # Lao, Myanmar, Khmer: scripts of the class too
        ("ພາສາລາວ", ors(trigrams("ພາສາລາວ")), trigrams("ພາສາລາວ")),
        ("မြန်မာ", ors(trigrams("မြန်မာ")), trigrams("မြန်မာ")),
        ("ខ្មែរ", ors(trigrams("ខ្មែរ")), trigrams("ខ្មែរ")),
    ],
)
def test_pieces_of_one_two_three_and_more_characters(query, match, like_terms):
    """``like_terms``: what LIKE matches where FTS5 is missing. Where it is not, a trigram it
    did not find is in no chunk: LIKE matches the pieces no trigram holds (and the trigrams
    where the trigram table may lack some chunks: ``like_trigrams``)."""
    plan = keyword_plan(query)
    grams = script_terms(query).grams
    assert (plan.table, plan.match) == ("chunks_trigram", match)
    assert plan.like_terms == [t for t in like_terms if t not in grams]
    assert keyword_plan(query, like_trigrams=True).like_terms == like_terms
    assert keyword_plan(query, fts=False).like_terms == like_terms


@pytest.mark.parametrize(
    "query, terms, like_terms",
    [
        # words with CJK: their parts of three characters or more, OR-ed with the trigrams;
        # stopwords dropped, a part under three characters (DB) only where nothing else is
        ("the DB 数据库迁移 rollback", [*trigrams("数据库迁移"), "rollback"], None),
        ("dry-run 回滚", ["dry", "run"], ["dry", "run", "回滚"]),
        ("Panthers ทีมรับ 308", [*trigrams("ทีมรับ"), "Panthers", "308"], None),
        ("NFL的防守", ["的防守", "NFL"], None),
        # CJK and Thai in one query
        ("部署流程 ปรับใช้", [*trigrams("部署流程"), *trigrams("ปรับใช้")], None),
    ],
)
def test_mixed_scripts(query, terms, like_terms):
    plan = keyword_plan(query)
    assert plan.table == "chunks_trigram"
    assert plan.match == ors(terms) and plan.any_of == [f'"{t}"' for t in terms]
    assert keyword_plan(query, fts=False).like_terms == (like_terms or terms)
    grams = script_terms(query).grams
    assert plan.like_terms == [t for t in like_terms or terms if t not in grams]


def test_a_long_text_keeps_max_terms_that_tile_it_first():
    """Over MAX_TERMS trigrams: the words' parts first, then the trigrams that tile each piece
    (covering every character), then the ones between; in the order of the text."""
    text = "".join(chr(0x4E00 + i) for i in range(60))  # 58 distinct trigrams
    got = script_terms(text + " Panthers")
    assert got.parts == ["Panthers"] and len(got.grams) == MAX_TERMS - 1
    tiles = [text[i : i + 3] for i in range(0, 58, 3)] + [text[57:]]
    assert set(tiles) <= set(got.grams)  # every character is in one of them
    assert got.grams == sorted(got.grams, key=text.index)
    assert keyword_plan(text + " Panthers").any_of == [f'"{t}"' for t in got.grams + got.parts]
    # text past the first MAX_TERMS tiles cannot change the plan
    longer = "".join(chr(0x4E00 + i) for i in range(400))
    assert keyword_plan(longer) == keyword_plan(longer[:200])
    assert len(keyword_plan(longer, fts=False).like_terms) == MAX_TERMS


def test_the_pieces_are_letters_digits_and_marks_of_the_class():
    """_script_piece, read from the Unicode database, takes each character of the class that is
    a letter, mark or digit (of any category but punctuation, symbol, separator)."""
    pattern = _script_piece()
    ranges = [(ord(a), ord(b)) for a, b in re.findall("(.)-(.)", TRIGRAM_SCRIPTS)]
    for low, high in ranges:
        for code in range(low, high + 1):
            char = chr(code)
            expected = unicodedata.category(char)[0] not in "PSZ"
            assert bool(pattern.fullmatch(char)) == expected, hex(code)
    assert pattern.findall("a数据b，ย้อน ๏ก") == ["数据", "ย้อน", "ก"]


# -- marks --------------------------------------------------------------------------------------


def test_snippets_mark_the_stretches_the_trigrams_matched():
    question = "黑豹队的防守丢了多少分？"
    text = "黑豹队的防守只丢了 308分，在联赛中排名第六。"
    # 黑豹队, 豹队的, 队的防, 的防守 overlap: one mark; 丢了多 is not in the text
    assert make_snippet(text, highlight_terms(question)) == (
        "<mark>黑豹队的防守</mark>只丢了 308分，在联赛中排名第六。"
    )
    thai = "ทีมรับของแพนเธอร์สยอมแพ้ที่คะแนนเท่าไร"
    marked = make_snippet("ทีมรับของแพนเธอร์สถอดใจที่คะแนน 308", highlight_terms(thai))
    assert marked.startswith("<mark>ทีมรับของแพนเธอร์ส</mark>ถอดใจ<mark>ที่คะแน")
    # a piece under three characters, alone, marks itself (LIKE matched it)
    assert make_snippet("缓存服务器和缓存", highlight_terms("缓存")) == (
        "<mark>缓存</mark>服务器和<mark>缓存</mark>"
    )
    # words and trigrams together; a trigram touching a word joins its mark
    assert make_snippet("Deploy NFL的防守 now", highlight_terms("NFL的防守 deploy")) == (
        "<mark>Deploy</mark> <mark>NFL的防守</mark> now"
    )


# -- XQuAD's Chinese and Thai -------------------------------------------------------------------


class CharCounts:
    """A stand-in provider: a text's characters counted into 64 buckets, and a 1, so that
    Chinese and Thai have vectors (the local model gives them the zero vector)."""

    model_id, dims = "char-counts", 65

    def embed(self, texts):
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in zip(out, texts, strict=True):
            for char in text:
                row[zlib.crc32(char.encode()) % 64] += 1
            row[64] = 1
        return out


def read(name: str) -> list:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def xquad(tmp_path_factory):
    """The sample's 20 paragraphs (10 Chinese, 10 Thai), a markdown file each, indexed with the
    stand-in vectors; and its questions."""
    root = tmp_path_factory.mktemp("xquad")
    for p in read("paragraphs.jsonl"):
        os.makedirs(root / "files" / p["lang"], exist_ok=True)
        (root / "files" / p["lang"] / f"{p['id']}.md").write_text(p["text"] + "\n")
    path = str(root / "x.db")
    with HybridIndex(path, embedder=CharCounts()) as idx:
        idx.index_folder(str(root / "files"))
    return path, read("questions.jsonl"), {p["id"]: p["text"] for p in read("paragraphs.jsonl")}


def first(idx, question: str, **options) -> str:
    found = idx.search(question, per_file=1, decay=False, min_score=0, now=NOW, **options)
    return found[0].path if found.results else None


@pytest.mark.parametrize(
    "lang, question, paragraph, marked",
    [
        ("zh", "黑豹队的防守丢了多少分？", "Super_Bowl_50-0", "黑豹队的防守"),
        ("th", "ทีมรับของแพนเธอร์สยอมแพ้ที่คะแนนเท่าไร", "Super_Bowl_50-0", "ทีมรับของแพนเธอร์ส"),
    ],
)
def test_a_question_not_written_in_its_paragraph_finds_it_first(
    xquad, lang, question, paragraph, marked
):
    path, _, texts = xquad
    assert re.sub(r"\W", "", question) not in texts[paragraph]
    with HybridIndex(path, embedder="none", readonly=True) as idx:
        found = idx.search(question, mode="keyword", decay=False, now=NOW)
        assert found.keyword_tier == "fts"
        assert found[0].path == f"{lang}/{paragraph}.md"
        assert f"<mark>{marked}</mark>" in found[0].snippet


@pytest.mark.parametrize("lang", ["zh", "th"])
def test_most_questions_find_their_paragraph_first(xquad, lang):
    """Among the ten paragraphs of their language (and ten of the other): as a verbatim phrase,
    19 of 97 Chinese questions found theirs first, and 61 of 97 Thai ones by unicode61's tokens
    (whole runs between spaces)."""
    path, questions, _ = xquad
    asked = [q for q in questions if q["lang"] == lang]
    with HybridIndex(path, embedder="none", readonly=True) as idx:
        hits = sum(
            first(idx, q["question"], mode="keyword") == f"{lang}/{q['paragraph']}.md"
            for q in asked
        )
    assert hits >= 0.75 * len(asked)


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_every_backend_gives_the_same_answers(xquad, mode):
    """The extension, numpy and pure Python, and the statement without the extension (FTS5's
    bm25() for bm25_candidate()): the same ids in the same order, the same scores."""
    path, questions, _ = xquad
    asked = [q["question"] for q in questions if q["lang"] == "zh"][:30]
    asked += [q["question"] for q in questions if q["lang"] == "th"][:30]
    options = {"mode": mode, "min_score": 0.0, "vector_floor": 0.0, "now": NOW}
    with HybridIndex(path, embedder=CharCounts(), readonly=True) as idx:
        for functions in ("numpy", "python"):
            with HybridIndex(path, embedder=CharCounts(), backend=functions) as plain:
                assert not plain.searcher.native
                for q in asked:
                    answers = [idx.search(q, backend=b, **options) for b in BACKENDS]
                    answers.append(plain.search(q, **options))
                    assert "bm25_candidate(" in answers[0].sql
                    assert "bm25_candidate(" not in answers[-1].sql
                    ids = [[r.id for r in a] for a in answers]
                    assert ids[1:] == ids[:-1] and ids[0], q
                    for a in answers[1:]:
                        scores = [r.score for r in answers[0]]
                        assert [r.score for r in a] == pytest.approx(scores, abs=1e-9), q
