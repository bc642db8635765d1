"""No file crowds the results: a file's neighbouring matching chunks are one hit, at most
per_file hits a file, the lines of the rest kept on its first hit; group_by_file is one."""

import json
import random
import re

import pytest
from conftest import run_hybridsql

from hybridsql import terminal
from hybridsql.errors import QueryError
from hybridsql.indexing.index import HybridIndex


def section(title: str, word: str, times: int) -> str:
    """A section of about 160 tokens (over a quarter of a chunk, so it is a chunk of its own)
    that says ``word`` ``times`` times, on lines of its own after the filler."""
    filler = " ".join(f"filler{i}" for i in range(120))
    return f"## {title}\n\n{filler}\n" + f"{word} sighting\n" * times


# long.md: six sections of one chunk each; zebra in 1, 2 (neighbours), 4 and 6, fewer times each.
COUNTS = {1: 5, 2: 4, 3: 0, 4: 3, 5: 0, 6: 2}
LONG = "# Long\n\n" + "\n".join(
    section(f"Part {n}", "zebra" if c else "okapi", c or 1) for n, c in COUNTS.items()
)


@pytest.fixture(scope="module")
def idx(tmp_path_factory):
    """long.md, and short.md: one chunk with zebra once."""
    folder = tmp_path_factory.mktemp("crowding")
    (folder / "long.md").write_text(LONG)
    (folder / "short.md").write_text("# Short\n\nOne zebra sighting, and nothing else.\n")
    path = str(tmp_path_factory.mktemp("db") / "crowding.db")
    with HybridIndex(path, embedder="none") as index:
        index.index_folder(str(folder))
        yield index


def lines(found):
    return [(r.path, r.start_line, r.end_line, r.other_ranges) for r in found]


def chunk_lines(idx):
    """long.md's chunks, their (start_line, end_line) in the file's order."""
    rows = idx.conn.execute(
        "select start_line, end_line from chunks where path = 'long.md' order by id"
    ).fetchall()
    return [tuple(r) for r in rows]


def test_every_chunk_is_a_result_when_asked(idx):
    chunks = chunk_lines(idx)
    assert len(chunks) == 6
    found = idx.search("zebra", mode="keyword", per_file=0)
    # Part 1 has the most zebras, part 6 the fewest; short.md's one is in a short chunk.
    long_hits = [(r.start_line, r.end_line) for r in found if r.path == "long.md"]
    assert long_hits == [chunks[0], chunks[1], chunks[3], chunks[5]]
    assert all(r.other_ranges == [] for r in found)


def test_neighbours_merge_and_a_file_gives_at_most_two_hits(idx):
    chunks = chunk_lines(idx)
    found = idx.search("zebra", mode="keyword")
    by_chunk = idx.search("zebra", mode="keyword", per_file=0)
    order = [r.path for r in by_chunk]
    # Parts 1 and 2 are one hit from part 1's first line to part 2's last, with the text of
    # both; part 4 is the second; part 6 is past the two and stays as lines on the first.
    hit = {
        chunks[0]: ("long.md", chunks[0][0], chunks[1][1], [list(chunks[5])]),
        chunks[1]: ("long.md", chunks[0][0], chunks[1][1], [list(chunks[5])]),
        chunks[3]: ("long.md", chunks[3][0], chunks[3][1], []),
        chunks[5]: None,
        (1, 3): ("short.md", 1, 3, []),
    }
    want = [hit[(r.start_line, r.end_line)] for r in by_chunk]
    want = [h for h in dict.fromkeys(map(repr, want)) if h != "None"]
    assert list(map(repr, lines(found))) == want
    merged = found.results[[r.path for r in found].index("long.md")]
    assert merged.text == "\n".join(LONG.split("\n")[merged.start_line - 1 : merged.end_line])
    assert merged.text.count("zebra sighting") == 5 + 4
    assert merged.id == by_chunk.results[order.index("long.md")].id  # the best chunk's
    assert merged.score == by_chunk.results[order.index("long.md")].score


def test_one_hit_a_file_is_group_by_file(idx):
    chunks = chunk_lines(idx)
    found = idx.search("zebra", mode="keyword", per_file=1)
    long_hit = next(r for r in found if r.path == "long.md")
    assert (long_hit.start_line, long_hit.end_line) == (chunks[0][0], chunks[1][1])
    assert long_hit.other_ranges == [list(chunks[3]), list(chunks[5])]
    grouped = idx.search("zebra", mode="keyword", group_by_file=True)
    assert [r.path for r in grouped] == [r.path for r in found]
    long_group = next(r for r in grouped if r.path == "long.md")
    assert (long_group.start_line, long_group.end_line) == chunks[0]
    assert long_group.other_ranges == [list(chunks[i]) for i in (1, 3, 5)]


def test_the_limit_counts_hits(idx):
    found = idx.search("zebra", mode="keyword", limit=2)
    assert len(found) == 2
    assert lines(found) == lines(idx.search("zebra", mode="keyword"))[:2]


@pytest.mark.parametrize("value", [-1, 1.5, True, 10_001])
def test_per_file_is_checked(idx, value):
    message = f"per_file must be an integer from 0 to 10000, not {value!r}"
    with pytest.raises(QueryError, match=f"^{re.escape(message)}$"):
        idx.search("zebra", per_file=value)


def test_the_command_shows_the_merged_lines_and_the_others(idx):
    chunks = chunk_lines(idx)
    args = ("search", "zebra", "--db", idx.db_path, "--embedder", "none", "--mode", "keyword")
    as_json = run_hybridsql(*args, "--json")
    assert as_json.returncode == 0, as_json.stderr
    results = json.loads(as_json.stdout)["results"]
    assert results == [r.as_dict() for r in idx.search("zebra", mode="keyword")]
    # On a terminal (piped, the command writes JSON):
    first = f"long.md:{chunks[0][0]}-{chunks[1][1]}"
    shown = terminal.document_lines(results, [])
    line = next(line for line in shown if first in line)
    assert line.endswith(f"also lines {chunks[5][0]}-{chunks[5][1]}")
    explain = run_hybridsql(*args, "--explain").stdout
    assert "which Python makes into at most 2 results a file" in explain


# -- a merged hit's text: an oracle over generated files ---------------------------------------

ANIMALS = ("zebra", "okapi", "quagga", "tapir")


def generated_files(seed: int) -> dict:
    """Markdown files of short lines, lines long enough to be cut into pieces, and runs of
    neighbouring matching chunks, the animals strewn at random (filler words are unique, so a
    piece's overlap with the one before is the only place their texts agree)."""
    rng = random.Random(seed)
    serial = iter(range(10**9))

    def words(n):
        said = [f"w{next(serial)}" for _ in range(n)]
        for _ in range(rng.choice([0, 0, 1, n // 60, n // 25])):
            said.insert(rng.randrange(len(said) + 1), rng.choice(ANIMALS))
        return " ".join(said)

    files = {}
    for f in range(6):
        parts = [f"# File {f}"]
        for p in range(rng.randrange(2, 6)):
            parts.append(f"## Part {p}")
            if rng.random() < 0.5:
                parts.append(words(rng.randrange(700, 1600)))  # one line, several pieces
            else:
                parts.append("\n".join(words(rng.randrange(4, 12)) for _ in range(40)))
        files[f"gen{seed}_{f}.md"] = "\n\n".join(parts) + "\n"
    return files


@pytest.mark.parametrize("seed", range(3))
def test_a_merged_hit_starts_with_the_chunk_that_matched_and_is_the_files_text(tmp_path, seed):
    files = generated_files(seed)
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    with HybridIndex(str(tmp_path / "gen.db"), embedder="none") as index:
        index.index_folder(str(folder))
        rows = index.conn.execute("select id, path, start_line, end_line, text from chunks")
        chunks = {r[0]: r[1:] for r in rows}
        later_piece = after_neighbour = 0
        for query in (*ANIMALS, "zebra okapi", "quagga tapir zebra"):
            options = {"mode": "keyword", "limit": 100}
            each = index.search(query, per_file=0, **options)
            found = index.search(query, **options)
            assert len(each) < 100  # every matching chunk is in `each`
            matching = {r.id for r in each}
            for r in found:
                path, start, end, text = chunks[r.id]
                assert text in r.text
                assert r.text.startswith(text)  # its first lines are what matched
                assert (r.path, r.start_line) == (path, start)
                assert r.end_line >= end
                assert r.text.count("\n") == r.end_line - r.start_line
                assert r.text in files[path]  # the file's own text, nothing left out
                before = chunks.get(r.id - 1)
                if r.id - 1 in matching and before[0] == path:
                    later_piece += before[1:3] == (start, end)
                    after_neighbour += before[1:3] != (start, end)
            # Every matching chunk's lines are shown by a hit of its file, or named by one.
            for c in each:
                ours = [r for r in found if r.path == c.path]
                assert any(
                    r.start_line <= c.start_line
                    and c.end_line <= r.end_line
                    or [c.start_line, c.end_line] in r.other_ranges
                    for r in ours
                ), (query, c.path, c.start_line, c.end_line)
        # The cases the old merge got wrong came up: the best chunk after a neighbour that
        # matched, as a later piece of a long line and as later lines.
        assert later_piece and after_neighbour
