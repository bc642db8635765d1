"""Tests of the markdown chunker and the token estimate, on examples/ and generated text."""

import dataclasses
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest
import tokenizers
from conftest import read_scifact
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsql.files import chunking
from hybridsql.files.chunking import Chunk, chunk_markdown, count_tokens

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = sorted((ROOT / "examples" / "memory").rglob("*.md"))
# all-MiniLM-L6-v2's tokenizer, as the package vendors it for the local model.
TOKENIZER = resources.files("hybridsql") / "data" / "tokenizer.json"
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def check_chunks(text, chunks, max_tokens):
    """Assert the invariants every chunking must keep."""
    lines = LINE_BREAK.split(text)
    covered = set()
    previous_start = 0
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        assert chunk.start_line >= previous_start
        previous_start = chunk.start_line
        assert chunk.text.strip()
        assert count_tokens(chunk.text) <= max_tokens
        whole = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        if chunk.text != whole:
            assert chunk.start_line == chunk.end_line
            assert chunk.text in whole
        assert lines[chunk.start_line - 1].strip() and lines[chunk.end_line - 1].strip()
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    assert [n for n, line in enumerate(lines, 1) if line.strip() and n not in covered] == []
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.end_line > a.end_line or a.start_line == b.end_line


def section(title, words, level=2):
    """A markdown section with a heading and about `words` words of prose in short lines."""
    body = [f"{title.lower()} note {i} about caching and deployments." for i in range(words // 6)]
    return "#" * level + f" {title}\n\n" + "\n".join(body) + "\n"


def test_count_tokens_cjk_counts_one_per_character():
    assert count_tokens("数据库迁移") == 5
    assert count_tokens("ログインの問題。") == 8
    assert count_tokens("「数据库」，ＡＢＣ") == 9


def test_count_tokens_counts_punctuation_and_whitespace():
    assert count_tokens("") == 0
    assert count_tokens(" \t\n\r\n ") == 0
    assert count_tokens("a, b.") == 4
    assert count_tokens("one two") == count_tokens("one\ntwo") == count_tokens("one   two")


def test_count_tokens_grows_with_long_words():
    short = count_tokens("database")
    assert short == 2
    assert count_tokens("x" * 2000) == 600


def real_tokenizer():
    tok = tokenizers.Tokenizer.from_str(TOKENIZER.read_text(encoding="utf-8"))
    tok.no_truncation()
    tok.no_padding()
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


def ratio(texts, real):
    return sum(map(count_tokens, texts)) / sum(map(real, texts))


def test_estimate_matches_tokenizer_on_english():
    real = real_tokenizer()
    docs = read_scifact("corpus", 500)
    assert 0.95 <= ratio([d["title"] + "\n" + d["text"] for d in docs], real) <= 1.05
    english = [
        line
        for path in EXAMPLE_FILES
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.isascii()
    ]
    assert 0.95 <= ratio(english, real) <= 1.05


@pytest.mark.parametrize(
    "script, pattern",
    [
        ("Chinese", "[\u4e00-\u9fff]"),
        ("Japanese", "[\u3040-\u30ff]"),
        ("Korean", "[\uac00-\ud7a3]"),
    ],
)
def test_estimate_matches_tokenizer_on_cjk(script, pattern):
    real = real_tokenizer()
    lines = [
        line
        for path in EXAMPLE_FILES
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(pattern, line)
    ]
    assert sum(map(count_tokens, lines)) >= 50, script
    assert 0.9 <= ratio(lines, real) <= 1.1, script


def test_chunk_is_frozen():
    chunk = Chunk(1, 1, "x", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        chunk.text = "y"


@pytest.mark.parametrize("text", ["", " ", "\n\n", " \t\r\n  \n"])
def test_blank_text_gives_no_chunks(text):
    assert chunk_markdown(text) == []


@pytest.mark.parametrize("max_tokens", [400, 64])
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_files_keep_invariants(path, max_tokens):
    text = path.read_text(encoding="utf-8")
    chunks = chunk_markdown(text, max_tokens=max_tokens, overlap_tokens=max_tokens // 5)
    check_chunks(text, chunks, max_tokens)


def test_examples_hold_a_long_file():
    text = (ROOT / "examples/memory/memory/2026-10-29.md").read_text(encoding="utf-8")
    assert count_tokens(text) > 1500
    assert len(chunk_markdown(text)) >= 4


def test_heading_path_follows_nesting():
    chunks = chunk_markdown((ROOT / "examples/memory/MEMORY.md").read_text(encoding="utf-8"))
    [prefs] = [c for c in chunks if "4 spaces in Python, never tabs" in c.text]
    assert prefs.heading == "MEMORY > Maya's preferences (she is the user; tech lead)"
    text = section("A", 120, 1) + section("B", 120, 2) + section("C", 120, 3) + section("D", 120, 2)
    assert [c.heading for c in chunk_markdown(text)] == ["A", "A > B", "A > B > C", "A > D"]
    assert [c.heading for c in chunk_markdown("no heading yet\n" + text)][:2] == ["", "A > B"]


def test_a_heading_path_keeps_at_most_max_title_chars_of_each_title():
    """Every chunk stores its heading path: a title as long as the file, kept whole, made the
    stored headings grow with the square of its length (issue 34, item 12)."""
    most = chunking.MAX_TITLE_CHARS
    long = " ".join(f"word{i}" for i in range(4000))
    cut = long[: most - 1] + "…"
    text = f"# {long} ##\n\n" + "".join(section(f"{level} {long}", 300, level) for level in (2, 3))
    chunks = chunk_markdown(text)
    assert len(chunks) > 20
    two, three = (f"{level} {long}"[: most - 1] + "…" for level in (2, 3))
    assert {c.heading for c in chunks} == {cut, f"{cut} > {two}", f"{cut} > {two} > {three}"}
    # A chunk that begins with a cut heading is read as beginning there, not inside a fence.
    [first] = [c for c in chunks if c.text.startswith("## 2 ")][:1]
    assert chunking.heading_at(first.text, first.heading, 2) == f"{cut} > {two}"
    setext = chunk_markdown(f"{long}\n===\n\nbody\n")
    assert {c.heading for c in setext} == {cut}


@settings(max_examples=500, deadline=None)
@given(line=st.text(alphabet=" \t#ab\\", max_size=30))
def test_atx_headings_read_as_the_commonmark_pattern_does(line):
    """_atx takes a heading apart as this pattern did, whose backtracking over a run of spaces
    took time quadratic in the line's length."""
    pattern = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*$")
    m = pattern.match(line)
    assert chunking._atx(line) == (m and (len(m.group(1)), (m.group(2) or "").strip()))


def test_sections_of_fair_size_start_their_own_chunk_without_overlap():
    text = "".join(section(name, 200) for name in ("Caching", "Deploys", "On-call"))
    chunks = chunk_markdown(text)
    assert [c.text.splitlines()[0] for c in chunks] == ["## Caching", "## Deploys", "## On-call"]
    assert all(a.end_line < b.start_line for a, b in zip(chunks, chunks[1:], strict=False))


def test_tiny_sections_are_merged():
    text = "".join(f"## Note {i}\n\nThe build passed.\n\n" for i in range(20))
    chunks = chunk_markdown(text)
    assert len(chunks) <= 2
    assert all(count_tokens(c.text) >= 100 for c in chunks[:-1])
    check_chunks(text, chunks, 400)


def test_long_section_overlaps_by_whole_lines():
    text = section("Timeline", 1500)
    lines = text.split("\n")
    chunks = chunk_markdown(text, max_tokens=200, overlap_tokens=40)
    assert len(chunks) >= 5
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start_line <= a.end_line
        shared = "\n".join(lines[b.start_line - 1 : a.end_line])
        assert 30 <= count_tokens(shared) <= 40
    check_chunks(text, chunks, 200)
    without = chunk_markdown(text, max_tokens=200, overlap_tokens=0)
    assert all(a.end_line < b.start_line for a, b in zip(without, without[1:], strict=False))


def test_size_cut_prefers_blank_lines():
    paragraph = "\n".join(f"line {i} of a paragraph about login errors." for i in range(8))
    text = "\n\n".join([paragraph] * 12)
    lines = text.split("\n")
    chunks = chunk_markdown(text, overlap_tokens=0)
    assert len(chunks) >= 3
    assert all(lines[c.end_line].strip() == "" for c in chunks[:-1])


def test_headings_inside_code_fences_do_not_cut():
    code = "\n".join(f"# step {i}\nrun --flag {i}" for i in range(60))
    for fence in ("```", "~~~~"):
        text = section("Runbook", 150) + f"{fence}bash\n{code}\n{fence}\n" + section("After", 150)
        chunks = chunk_markdown(text)
        assert {c.heading for c in chunks} == {"Runbook", "After"}
        check_chunks(text, chunks, 400)
    unclosed = section("Runbook", 150) + "```\n" + code + "\n## Still code\n" + code
    assert {c.heading for c in chunk_markdown(unclosed)} == {"Runbook"}


def test_setext_headings_count_and_rules_and_front_matter_do_not():
    text = (ROOT / "tests/data/docs/release-notes.md").read_text(encoding="utf-8")
    chunks = chunk_markdown(text, max_tokens=80, overlap_tokens=0)
    assert [(c.start_line, c.heading) for c in chunks] == [
        (1, "Harbor gateway release notes"),
        (6, "Harbor gateway release notes > Version 3.2"),
        (13, "Harbor gateway release notes > Version 3.1"),
        (20, "Harbor gateway release notes > Known issues"),  # the --- after it is a rule
        (28, "Harbor gateway release notes > Version 3.0"),
    ]
    front = "---\ntitle: Runbook\n---\n\nIntro line.\n- a list item\n---\n***\nA rule ends\n---\n"
    chunks = chunk_markdown(front + section("Steps", 150, 3), 20, 0)
    assert {c.heading for c in chunks} == {"", "A rule ends > Steps"}
    paragraph = "Two lines of a paragraph\nare not a title\n---\n"
    assert {c.heading for c in chunk_markdown(paragraph + "    code\n===\n")} == {""}


def test_long_cjk_line_is_split_inside_the_line():
    sentences = [f"第{i}次数据库迁移在周日凌晨完成，登录问题已经解决。" for i in range(200)]
    line = "".join(sentences)
    text = "## 数据库迁移\n\n" + line + "\n\n之后的说明。\n"
    chunks = chunk_markdown(text, max_tokens=400, overlap_tokens=80)
    check_chunks(text, chunks, 400)
    pieces = [c for c in chunks if c.start_line == 3]
    assert len(pieces) >= count_tokens(line) // 400
    assert all(c.end_line == 3 and c.heading == "数据库迁移" for c in pieces)
    assert all(p.text.endswith("。") for p in pieces)
    offsets = [line.index(p.text) for p in pieces]
    assert offsets == sorted(offsets) and offsets[0] == 0
    assert all(
        b < a + len(p.text) <= b + len(q.text)
        for a, b, p, q in zip(offsets, offsets[1:], pieces, pieces[1:], strict=False)
    )
    assert offsets[-1] + len(pieces[-1].text) == len(line)


def test_minified_line_is_split():
    line = json.dumps({f"key{i}": "v" * 30 for i in range(2000)}, separators=(",", ":"))
    chunks = chunk_markdown("x\n" + line + "\n" + "z" * 5000 + "\n", max_tokens=100)
    check_chunks("x\n" + line + "\n" + "z" * 5000 + "\n", chunks, 100)
    assert {c.start_line for c in chunks} == {1, 2, 3}


def test_crlf_and_cr_give_the_same_chunks():
    text = (ROOT / "examples/memory/memory/2026-11-03.md").read_text(encoding="utf-8")
    expected = chunk_markdown(text, max_tokens=100)
    assert chunk_markdown(text.replace("\n", "\r\n"), max_tokens=100) == expected
    assert chunk_markdown(text.replace("\n", "\r"), max_tokens=100) == expected


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_tokens": 15}, "chunk_markdown(): max_tokens must be at least 16, got 15"),
        (
            {"max_tokens": 100, "overlap_tokens": 100},
            (
                "chunk_markdown(): overlap_tokens must be at least 0 and below max_tokens (100), "
                "got 100"
            ),
        ),
        (
            {"overlap_tokens": -1},
            (
                "chunk_markdown(): overlap_tokens must be at least 0 and below max_tokens (400), "
                "got -1"
            ),
        ),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        chunk_markdown("text", **kwargs)


def chunking_work(text, monkeypatch):
    """(work, chunks) of chunk_markdown(text), the work counted: characters whose tokens were
    estimated, items the window loops read from the per-line lists, characters of the chunks."""
    work = Counter()
    tenths, windows = chunking._tenths, chunking._windows

    class Counted(list):
        def __getitem__(self, i):
            work["items read"] += 1
            return super().__getitem__(i)

    def counted_tenths(line):
        work["characters costed"] += len(line)
        return tenths(line)

    def counted_windows(costs, budget, overlap, hard, soft):
        return windows(Counted(costs), budget, overlap, Counted(hard), Counted(soft))

    with monkeypatch.context() as m:
        m.setattr(chunking, "_tenths", counted_tenths)
        m.setattr(chunking, "_windows", counted_windows)
        chunks = chunk_markdown(text)
    work["characters of chunks"] = sum(len(c.text) for c in chunks)
    return work, chunks


def test_one_megabyte_takes_linear_work_and_is_deterministic(monkeypatch):
    """Each character costed at most once, a few reads a line, the text about once in the chunks,
    and four times the text four times the work. Counted, not timed: a loaded machine cannot fail
    it, and a quadratic step cannot pass it (bench/run.py times indexing, chunking included)."""
    examples = "\n".join(p.read_text(encoding="utf-8") for p in EXAMPLE_FILES)
    quarter = examples * (250_000 // len(examples.encode()) + 1)
    text = quarter * 4
    assert len(text.encode()) > 1_000_000
    small, _ = chunking_work(quarter, monkeypatch)
    work, chunks = chunking_work(text, monkeypatch)
    assert work["characters costed"] <= len(text)
    assert work["items read"] <= 4 * len(LINE_BREAK.split(text))
    assert work["characters of chunks"] <= 1.5 * len(text)
    assert all(work[name] <= 4.5 * small[name] for name in work), (small, work)
    assert chunk_markdown(text) == chunks


markdownish = st.lists(
    st.one_of(
        st.sampled_from(["", " ", "# Title", "## Sub", "### Deep", "```", "~~~", "- item", "\t"]),
        st.text(alphabet="ab 数据。ロ데#`\t.", max_size=40),
        st.text(alphabet="xyz数。 ", min_size=200, max_size=600),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    lines=markdownish,
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    max_tokens=st.integers(16, 120),
    overlap=st.integers(0, 119),
)
def test_random_markdown_keeps_invariants(lines, newline, max_tokens, overlap):
    text = newline.join(lines)
    overlap = overlap % max_tokens
    check_chunks(text, chunk_markdown(text, max_tokens, overlap), max_tokens)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), max_tokens=st.integers(16, 60), overlap=st.integers(0, 59))
def test_arbitrary_text_keeps_invariants(text, max_tokens, overlap):
    overlap = overlap % max_tokens
    check_chunks(text, chunk_markdown(text, max_tokens, overlap), max_tokens)
