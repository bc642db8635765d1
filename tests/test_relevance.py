"""What a person would pick: an exact token above the longer words it is a prefix of, the
heading over the matched lines, and snippets that mark whole words."""

import random
from pathlib import Path

import pytest
from conftest import EXAMPLES

from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore, Ranking
from hybridsql.search import SearchOptions, make_snippet

BACKENDS = ["extension", "numpy", "python"]


def example_sentences():
    """Lines of prose from the example memory folder, list markers stripped."""
    sentences = []
    for path in sorted(Path(EXAMPLES).rglob("*.md")):
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.strip("-* ")
            if len(line.split()) >= 6 and not line.startswith("#"):
                sentences.append(line)
    return sentences


@pytest.fixture(scope="module")
def token_index(tmp_path_factory):
    """Memories of real sentences, each with a code of its own; in each group of eight, one code
    (the base) is a prefix of the other seven. Those end in a digit, which the porter stemmer
    leaves alone: ``tokab12s`` would be the plural of ``tokab12`` to FTS5, the same word."""
    rng = random.Random(14)
    sentences = example_sentences()
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    path = str(tmp_path_factory.mktemp("tokens") / "tokens.db")
    bases = {}
    with HybridIndex(path, embedder="local") as index:
        store = MemoryStore(index)
        for _ in range(12):
            base = "tok" + "".join(rng.choices(alnum, k=5))
            longer = [
                base + "".join(rng.choices(alnum, k=rng.randint(0, 3))) + rng.choice("0123456789")
                for _ in range(7)
            ]
            for code in [base, *longer]:
                text = " ".join(rng.sample(sentences, rng.randint(1, 3))) + f" Code {code}."
                memory = store.add(text)
                if code == base:
                    bases[base] = memory.id
    return path, bases


def test_an_exact_token_ranks_above_the_words_it_is_a_prefix_of(token_index):
    """With prefix matching (memory search's default) every code of a group matches its base
    once; the memory holding the base itself must come first by keyword, and among the first
    three in hybrid search, where the vectors of random codes add noise. Before exact hits
    counted twice, no base came first by keyword, and 8 of the 12 were not in the first three."""
    path, bases = token_index
    options = {"prefix": True, "min_score": 0.0}
    ranking = Ranking(recall_boost=0)  # searching must not change the next search's scores
    with HybridIndex(path, embedder="local") as index:
        for backend in BACKENDS:
            store = MemoryStore(
                index, ranking=ranking, options=SearchOptions(**options, backend=backend)
            )
            for base, memory_id in bases.items():
                keyword = [h.memory.id for h in store.search(base, mode="keyword", limit=3)]
                hybrid = [h.memory.id for h in store.search(base, mode="hybrid", limit=3)]
                assert keyword[0] == memory_id, (backend, base)
                assert memory_id in hybrid, (backend, base)
    with HybridIndex(path, embedder="local", backend="python") as plain:  # bm25(), no extension
        store = MemoryStore(plain, ranking=ranking, options=SearchOptions(**options))
        for base, memory_id in bases.items():
            found = store.search(base, mode="keyword", limit=3)
            assert "bm25_candidate(" not in found.sql
            assert found[0].memory.id == memory_id, base


# -- the heading over the matched lines, and whole-word marks ----------------------------------

DOCS = Path(__file__).resolve().parent / "data" / "docs"


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """tests/data/docs indexed: an error reference of one chunk and many ## sections, release
    notes with setext headings, and a Chinese runbook."""
    path = str(tmp_path_factory.mktemp("docs") / "docs.db")
    with HybridIndex(path, embedder="local") as index:
        index.index_folder(str(DOCS))
        yield index


def own_heading(index, result):
    return index.conn.execute("select heading from chunks where id = ?", (result.id,)).fetchone()[0]


NOTES = "Harbor gateway release notes"
HEADINGS = [  # a query, and the file and section its best result is in
    ("ERR_INVALID_ADDRESS_FAMILY", "errors.md", "Error codes > ERR_INVALID_ADDRESS_FAMILY"),
    ("impossible value negative timeout", "errors.md", "Error codes > ERR_INVALID_ARG_VALUE"),
    ("stream destroyed", "errors.md", "Error codes > ERR_STREAM_DESTROYED"),
    ("rate limiter per token", "release-notes.md", f"{NOTES} > Version 3.2"),
    ("long polls", "release-notes.md", f"{NOTES} > Known issues"),
    ("certificates reloaded", "release-notes.md", f"{NOTES} > Version 3.0"),
    ("恢复演练", "数据库.md", "数据库运维手册 > 备份"),
    ("慢查询日志", "数据库.md", "数据库运维手册 > 迁移"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_heading_is_the_one_over_the_matched_lines(docs, backend):
    """Chunks hold several short sections; a result is labelled by the section its first marked
    word is in. The release notes' headings are setext (Version 3.0 follows a --- rule, which is
    no heading). Most of these chunks start under another heading, so their own label would be
    wrong: the test needs them to."""
    other = 0
    for query, path, heading in HEADINGS:
        top = docs.search(query, backend=backend)[0]
        assert (top.path, top.heading) == (path, heading), query
        assert top.match_type != "semantic"
        other += own_heading(docs, top) != heading
    assert other >= 5


def test_a_semantic_hit_keeps_its_chunks_heading(docs):
    found = docs.search("ERR_INVALID_ARG_TYPE", mode="semantic")
    assert found[0].path == "errors.md"
    assert all(r.match_type == "semantic" and r.heading == own_heading(docs, r) for r in found)


def test_snippets_mark_whole_words_only(docs):
    """ERR and arg are words of the query, not pieces of ERR_INVALID_ARG_TYPE or argument; an
    inflection of a typed word is the word (the porter stemmer finds it too)."""
    found = docs.search("ERR arg", mode="keyword")
    assert {r.path for r in found} == {"errors.md"}
    assert all("<mark>" not in r.snippet and r.heading == own_heading(docs, r) for r in found)
    snippets = [r.snippet for r in docs.search("argument releases", mode="keyword")]
    assert any("An <mark>argument</mark> was of the wrong type" in s for s in snippets)
    assert any("each <mark>release</mark> of the gateway" in s for s in snippets)
    errors = (DOCS / "errors.md").read_text(encoding="utf-8")
    assert "stable across <mark>releases</mark>;" in make_snippet(errors, ["release"])
    assert "<mark>" not in make_snippet(errors, ["ERR", "arg", "rang", "INVALID"])
    assert "<mark>ERR_OUT_OF_RANGE</mark>" in make_snippet(errors, ["ERR_OUT_OF_RANGE", "ERR"])
    prefixed = docs.search("authent", mode="keyword", prefix=True)[0]
    assert "without\n<mark>authentication</mark>." in prefixed.snippet
