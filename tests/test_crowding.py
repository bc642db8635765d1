"""No file crowds the results: a file's neighbouring matching chunks are one hit, at most
per_file hits a file, the lines of the rest kept on its first hit; group_by_file is one."""

import json
import re

import pytest
from conftest import run_hybridsql

from hybridsql import terminal
from hybridsql.errors import QueryError
from hybridsql.index import HybridIndex


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
