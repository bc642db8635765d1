"""What the embedding model reads: every chunk's text within its window, and no vector score from
text it cannot read (issue 14, items 1 and 2). The real local model and tokenizer throughout."""

import shutil

import pytest
from conftest import EXAMPLES

from hybridsql.embedding import embedder as embed
from hybridsql.indexing.index import HybridIndex

WINDOW = embed.LocalProvider.window - 2  # [CLS] and [SEP] are the model's own


@pytest.fixture(scope="module")
def local():
    pytest.importorskip("onnxruntime", reason="the local model needs the 'local' extra")
    return embed.LocalProvider()


def real_tokens(local, text):
    return local.count_tokens([text])[0]


def test_every_chunk_fits_the_window(local, tmp_path):
    """Chunks are sized to the local model's window, counted by its own tokenizer: no chunk of
    the example memory has more word pieces than the model reads at once (at 400 estimated
    tokens, a third of them had, and their ends never reached their vectors)."""
    with HybridIndex(str(tmp_path / "mem.db"), embedder="local") as idx:
        idx.index_folder(EXAMPLES)
        texts = [t for (t,) in idx.conn.execute("select text from chunks")]
    counts = local.count_tokens(texts)
    assert len(texts) > 60
    assert max(counts) <= WINDOW
    assert sum(n > WINDOW * 3 // 4 for n in counts) >= 5  # sized to the window, not far below


def test_an_index_chunked_to_another_size_is_chunked_again(local, tmp_path):
    """An index made with 400-token chunks (before windows) is cut again on the next run, every
    file, and records the size it used; the run after that finds every file unchanged."""
    folder = tmp_path / "memory"
    shutil.copytree(EXAMPLES, folder)
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder="local") as idx:
        first = idx.index_folder(str(folder))
        idx.conn.execute("update meta set value = 400 where key = 'chunk_tokens'")
        again = idx.index_folder(str(folder))
        assert again.files_indexed == first.files_indexed == again.files_seen
        # The examples' notes MiniLM cannot read are said again, as at the first run.
        unread = [w for w in again.warnings if "cannot read" in w[1]]
        assert unread == [w for w in first.warnings if "cannot read" in w[1]]
        assert [w for w in again.warnings if w not in unread] == [
            [
                str(folder),
                f"chunks are now cut to {WINDOW} tokens, were 400: every file is chunked again",
            ]
        ]
        assert idx.conn.execute("select value from meta where key = 'chunk_tokens'").fetchone() == (
            WINDOW,
        )
        third = idx.index_folder(str(folder))
        assert (third.files_indexed, third.files_unchanged) == (0, third.files_seen)


def test_what_a_long_text_says_after_its_first_window_reaches_its_vector(local):
    """A memory is one chunk whatever its length, and an index made before windows holds longer
    chunks: a sentence past the first window still moves the vector toward its meaning
    (truncated, the two texts below had the same vector)."""
    filler = "The weekly report lists shipments, carriers and the state of each route. " * 18
    tail = (
        "The vaccine cold chain broke in the Lisbon warehouse: the refrigerators failed"
        " overnight and the medicine stock spoiled."
    )
    assert real_tokens(local, filler) <= WINDOW < real_tokens(local, filler + tail)
    query, told, untold = local.embed(
        ["refrigerated medicine storage failure", filler + tail, filler + "Nothing else."]
    )
    assert query @ told > 0.15 > 0.1 > query @ untold


HEX = "\n".join(
    "    " + "".join(f"{(i * 37 + j * 11) % 256:02x}" for j in range(32)) for i in range(16)
)
DOCS = {
    "notes/certs.md": f"# Certificates\n\nThe staging RSA public key modulus:\n\n{HEX}\n",
    "notes/tests-zh.md": "# 測試\n\n整合測試在每次合併之前執行。\n",
    "notes/files-zh.md": "# 文件\n\n读取文件之前先检查权限。如何读取文件：用 open()。\n",
    "notes/deploy.md": "# Deploys\n\nWe deploy on Tuesdays after the staging soak.\n",
}


@pytest.fixture(scope="module")
def mixed(local, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixed")
    for rel, text in DOCS.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    idx = HybridIndex(str(folder / "mem.db"), embedder="local")
    idx.index_folder(str(folder))
    yield idx
    idx.close()


def test_a_hex_dump_gets_no_vector_score(mixed):
    """The RSA modulus is text the model cannot read: its chunk's vector is zero, so no query
    finds it by meaning (it scored 0.71 against a CJK query before)."""
    row = mixed.conn.execute(
        "select vector_json(v.vector) from vectors v join chunks c on c.id = v.chunk_id"
        " where c.path = 'notes/certs.md'"
    ).fetchone()
    assert set(eval(row[0])) == {0.0}
    found = mixed.search("cryptographic key material", mode="semantic", vector_floor=0.0)
    assert all(r.path != "notes/certs.md" or r.vector_score == 0.0 for r in found)


@pytest.mark.parametrize("backend", ["extension", "numpy", "python"])
@pytest.mark.parametrize(
    "query, expected", [("測試", "notes/tests-zh.md"), ("如何读取文件", "notes/files-zh.md")]
)
def test_a_query_the_model_cannot_read_is_answered_by_its_words(mixed, backend, query, expected):
    """An English model reads CJK as [UNK] and single characters: the search says so, runs on
    keywords alone, and the chunk that holds the words is first (before: a hex dump above it,
    or three unrelated semantic hits)."""
    found = mixed.search(query, backend=backend)
    assert found.mode == "keyword"
    assert found.notes == ["all-MiniLM-L6-v2-int8 cannot read this query: keyword-only search"]
    assert [r.path for r in found] == [expected]


def test_a_readable_query_still_searches_by_meaning(mixed):
    found = mixed.search("which weekday do deployments happen", backend="extension")
    assert found.mode == "hybrid" and found.notes == []
    assert found[0].path == "notes/deploy.md" and found[0].vector_score > 0.25
