"""What a person would pick: an exact token above the longer words it is a prefix of, the
heading over the matched lines, and snippets that mark whole words."""

import random
from pathlib import Path

import pytest
from conftest import EXAMPLES

from hybridsql.index import HybridIndex
from hybridsql.memory import MemoryStore, Ranking
from hybridsql.search import SearchOptions

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
