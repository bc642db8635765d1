"""Split markdown into heading-aware, overlapping chunks sized in estimated MiniLM tokens."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat

# count_tokens() estimates the all-MiniLM-L6-v2 WordPiece tokenizer without loading it. The text
# is cut into units, each with a cost in tenths of a token:
# - a run of letters (at most 20; longer runs are cut every 20) costs _WORD_COST[length], the
#   mean WordPiece count per word length measured on SciFact, the Node.js API docs and the GPL;
# - a run of digits (at most 20) costs _DIGIT_COST[length] ("2026" is "202" "##6");
# - a Hangul syllable costs 2.3: the tokenizer decomposes it into 2 or 3 jamo pieces;
# - every other visible character costs 1: punctuation, and each Han, kana and fullwidth character.
# Units are split at whitespace, so the cost of a text is the sum of the costs of its lines.
# Estimate / real tokens, measured with `tokenizers` (tests/test_chunking.py keeps it within 10 %):
# SciFact corpus 1.01, Node.js API markdown 0.98, GPL-3 1.13, English of examples/memory 0.99;
# Chinese 1.01, Japanese 1.00, Korean 0.98. A fullwidth letter run is overestimated: the
# tokenizer turns the whole run into one [UNK].
_CJK = (
    "\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff"
)
_UNIT = re.compile(rf"([\uac00-\ud7a3])|([^\D{_CJK}]{{1,20}})|([^\W\d_{_CJK}]{{1,20}})|\S")
_WORD_COST = (0, 10, 10, 11, 11, 12, 12, 12, 13, 15, 17, 19, 22, 24, 30, 38, 44, 50, 54, 58, 60)
_DIGIT_COST = (0, 10, 10, 12, 17) + tuple(55 * n // 10 for n in range(5, 21))
_HANGUL_COST = 23
_OTHER_COST = 10

# The costliest unit (20 digits) is 11 tokens, so with this floor every unit fits in a chunk.
_MIN_MAX_TOKENS = 16
# An over-budget line is cut with each unit counted by the model's tokenizer up to this many
# units (a long paragraph of a script the estimate knows less well: Thai, Chinese); past it,
# a unit's estimate scaled to the line's count.
_COUNTED_UNITS = 4096
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# An ATX heading's opening; its title and closing #s are taken apart by _atx without a regex,
# whose backtracking over a run of spaces took time quadratic in the line's length.
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]|$)")
# A chunk's heading path keeps at most this many characters of each title (one title a level,
# six levels): every chunk stores its path, so a title as long as the file would make the index
# grow with the square of the heading's length.
MAX_TITLE_CHARS = 200
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
# A setext heading is a line of text over a line of = (level 1) or - (level 2). Only a one-line
# paragraph counts (CommonMark would take a longer paragraph whole): a rule drawn under a
# paragraph is more often meant as a rule than as a heading of several lines.
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
# Lines that cannot be a setext heading's text: blank, indented code, a quote, a list item; nor
# can a thematic break (_RULE), which also ends the paragraph before it.
_RULE = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_NOT_TITLE = re.compile(r"[ \t]*$| {4}| {0,3}(?:\t|>|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$))")
_FRONT_MATTER = re.compile(r"---[ \t]*$")  # YAML front matter: from line 1 to the next --- or ...
_FRONT_MATTER_END = re.compile(r"(?:---|\.\.\.)[ \t]*$")
_SENTENCE_END = frozenset(".!?;。！？；…")


def _title(text: str) -> str:
    """A heading's title as a heading path keeps it: stripped, at most MAX_TITLE_CHARS long."""
    text = text.strip()
    return text if len(text) <= MAX_TITLE_CHARS else text[: MAX_TITLE_CHARS - 1] + "…"


def _atx(line: str) -> tuple[int, str] | None:
    """(level, title as the path keeps it) where ``line`` is an ATX heading, else None. The
    title loses its closing sequence of #s (one after a space or tab, or all of it)."""
    opening = _ATX.match(line)
    if opening is None:
        return None
    title = line[opening.end(1) :].strip(" \t")
    unclosed = title.rstrip("#")
    if unclosed != title and (not unclosed or unclosed[-1] in " \t"):
        title = unclosed
    return len(opening.group(1)), _title(title)


def _units(text: str) -> Iterator[tuple[int, int, int]]:
    """Yield (start, end, cost in tenths of a token) for each unit of text."""
    for m in _UNIT.finditer(text):
        kind = m.lastindex
        if kind is None:
            cost = _OTHER_COST
        elif kind == 1:
            cost = _HANGUL_COST
        elif kind == 2:
            cost = _DIGIT_COST[m.end() - m.start()]
        else:
            cost = _WORD_COST[m.end() - m.start()]
        yield m.start(), m.end(), cost


def _tenths(text: str) -> int:
    """Estimated tokens of text, in tenths of a token."""
    return sum(cost for _, _, cost in _units(text))


def count_tokens(text: str) -> int:
    """Estimate how many all-MiniLM-L6-v2 WordPiece tokens text has (no special tokens)."""
    return -(-_tenths(text) // 10)


@dataclass(frozen=True)
class Chunk:
    """A piece of a markdown file: 1-based inclusive line range, its text and heading path."""

    start_line: int
    end_line: int
    text: str
    heading: str


def _windows(
    costs: Sequence[int], budget: int, overlap: int, hard: Sequence[bool], soft: Sequence[bool]
) -> Iterator[tuple[int, int]]:
    """Yield greedy [start, end) windows of items whose costs add up to at most budget.

    An item over budget gets a window of its own. Zero-cost items never start or end a window.
    A window ends before a hard item (a heading) once it holds a quarter of the budget; when it
    must end for size, it ends at the last soft item that keeps half the budget, and the next
    window repeats up to overlap worth of its last items, never reaching back past a hard item.
    """
    n = len(costs)
    acc = array("q", [0])  # 8 bytes an item: a 20 MB line has millions of units
    for cost in costs:
        acc.append(acc[-1] + cost)
    start = 0
    while True:
        while start < n and costs[start] == 0:
            start += 1
        if start == n:
            return
        if costs[start] > budget:
            yield start, start + 1
            start += 1
            continue
        # Grow the window while it fits, stopping at a heading once a quarter full.
        end = start + 1
        while (
            end < n
            and acc[end + 1] - acc[start] <= budget
            and not (hard[end] and acc[end] - acc[start] >= budget // 4)
        ):
            end += 1
        sized = end < n and acc[end + 1] - acc[start] > budget and costs[end] <= budget
        if sized:  # Move the cut back to a soft item, if that keeps half the budget.
            for cut in range(end, start, -1):
                if acc[cut] - acc[start] < budget // 2:
                    break
                if soft[cut]:
                    end = cut
                    break
        last = end
        while costs[last - 1] == 0:
            last -= 1
        yield start, last
        following = end
        while following < n and costs[following] == 0:
            following += 1
        if not sized or following == n or hard[following] or costs[following] > budget:
            start = end
            continue
        # Overlap: step back over the last items, leaving room for the next new item.
        next_start = end
        while (
            not hard[next_start]
            and next_start - 1 > start
            and acc[end] - acc[next_start - 1] <= overlap
        ):
            next_start -= 1
        while next_start < end and acc[following + 1] - acc[next_start] > budget:
            next_start += 1
        start = next_start


def _headings(
    lines: list[str], file_start: bool = True, fence: str = ""
) -> Iterator[tuple[tuple | None, bool]]:
    """Per line: (level, title) where a heading starts, else None; and whether the line ends
    inside a code fence. Headings in fences do not count, nor text in YAML front matter when
    ``file_start`` (the lines begin a file). A setext heading starts on its text line.
    ``fence``: the fence the lines begin inside, if any."""
    n, i = len(lines), 0
    if file_start and n and _FRONT_MATTER.match(lines[0]):
        end = next((j for j in range(1, n) if _FRONT_MATTER_END.match(lines[j])), None)
        if end is not None:
            yield from ((None, False) for _ in range(end + 1))
            i = end + 1
    paragraph = False  # the line before is text, so this one cannot start a one-line paragraph
    while i < n:
        line, heading = lines[i], None
        if fence:
            closing = _FENCE.match(line)
            if closing and closing.group(1).startswith(fence) and not line[closing.end() :].strip():
                fence = ""
            yield None, bool(fence)
            i += 1
            continue
        opening = _FENCE.match(line)
        if opening:
            fence = opening.group(1)
        elif atx := _atx(line):
            heading = atx
        elif not paragraph and i + 1 < n and not _NOT_TITLE.match(line) and not _RULE.match(line):
            underline = _SETEXT.match(lines[i + 1])
            if underline:
                yield (1 if underline.group(1)[0] == "=" else 2, _title(line)), False
                yield None, False
                i += 2
                continue
        yield heading, bool(fence)
        paragraph = not fence and heading is None and bool(line.strip()) and not _RULE.match(line)
        i += 1


def _enter(titles: list, heading: tuple) -> list:
    """The (level, title) path after ``heading``: it ends the sections of its level or deeper."""
    level, title = heading
    return [(lvl, t) for lvl, t in titles if lvl < level] + ([(level, title)] if title else [])


def _scan(
    lines: list[str], counts: Sequence[int] | None = None, headings: bool = True
) -> tuple[list[int], list[bool], list[bool], list[str]]:
    """Per line: cost in tenths, is a heading, follows a blank line, heading path in effect.
    ``counts``: each line's real token count, else it is estimated. ``headings``: False for
    plain text, where no line is a heading (a '#' line is a comment or a number)."""
    costs, hard, soft, paths = [], [], [], []
    titles: list[tuple[int, str]] = []
    previous_blank = False
    marks = _headings(lines) if headings else repeat((None, False))
    for i, (line, (heading, in_fence)) in enumerate(zip(lines, marks, strict=False)):
        cost = _tenths(line) if counts is None else 10 * counts[i]
        if heading:
            titles = _enter(titles, heading)
        costs.append(cost)
        hard.append(heading is not None)
        soft.append(previous_blank)
        paths.append(" > ".join(t for _, t in titles))
        previous_blank = cost == 0 and not in_fence
    return costs, hard, soft, paths


def heading_at(text: str, heading: str, line: int, file_start: bool = False) -> str:
    """The heading path in effect at ``line`` (0-based) of a chunk's ``text``, whose first line
    is under ``heading`` (the chunk's own path). ``file_start``: the chunk begins its file.

    The stored path has no levels, so a heading inside the chunk is placed by assuming them:
    consecutive, ending at the level of the chunk's first line where that is a heading, else
    1, 2, 3... A document that skips levels (``#`` then ``###``) in a chunk that starts inside a
    section may keep a title that the heading should have closed. Nor is it stored whether the
    chunk starts inside a code fence: it does where its first line reads as a heading that its
    path does not end with (``# a shell comment``), and the first fence line closes it; a
    chunk that starts inside a fence with other text may take a comment after it for a heading.
    """
    lines = _LINE_BREAK.split(text)
    names = heading.split(" > ") if heading else []
    atx, fence = _atx(lines[0]), ""
    if atx and atx[1] and names[-1:] != [atx[1]]:
        fence = next((m.group(1) for m in map(_FENCE.match, lines) if m), "```")
    found = _headings(lines[: line + 2], file_start, fence)  # +1: a setext heading's underline
    first, _ = next(found)
    last = len(names) if first is None else first[0] - (not first[1])
    titles = [(last - len(names) + 1 + i, t) for i, t in enumerate(names)]
    for _, (h, _) in zip(range(line), found, strict=False):
        if h:
            titles = _enter(titles, h)
    return " > ".join(t for _, t in titles)


def _split_line(
    line: str, line_no: int, heading: str, budget: int, overlap: int, counter=None
) -> list[Chunk]:
    """Cut one over-budget line into overlapping pieces, preferring to end at a sentence end.

    The units are kept in arrays, not tuples: a 20 MB line without a break is millions of
    units, and tuples of them took 1.4 GB (tests/test_resources.py). With ``counter`` (a
    model's tokenizer), each unit costs what it counts, up to _COUNTED_UNITS units; a longer
    line's estimates are scaled by its own count over their sum.
    """
    starts, ends, costs = array("i"), array("i"), array("i")
    for start, end, cost in _units(line):
        starts.append(start)
        ends.append(end)
        costs.append(cost)
    if counter is not None and costs:
        if len(costs) <= _COUNTED_UNITS:
            counts = counter([line[starts[i] : ends[i]] for i in range(len(costs))])
            costs = array("i", (10 * c for c in counts))
        else:
            scale = 10 * counter([line])[0] / max(1, sum(costs))
            costs = array("i", (round(c * scale) for c in costs))
    after_end = bytearray(len(costs))  # 1 where the unit follows a sentence end
    for i in range(1, len(costs)):
        after_end[i] = line[ends[i - 1] - 1] in _SENTENCE_END
    return [
        Chunk(line_no, line_no, line[starts[first] : ends[last - 1]], heading)
        for first, last in _windows(costs, budget, overlap, bytes(len(costs)), after_end)
    ]


def chunk_markdown(
    text: str, max_tokens: int = 400, overlap_tokens: int = 80, counter=None, headings=True
) -> list[Chunk]:
    """Split markdown into chunks of at most max_tokens tokens, estimated by count_tokens() or
    counted by ``counter(lines) -> counts`` (an embedder's own tokenizer).

    Chunks are whole lines. A heading starts a new chunk once the current one holds a quarter of
    max_tokens (smaller sections are merged); a chunk that must end for size ends after a blank
    line if it can, else at a line end, and shares about overlap_tokens of its last lines with
    the next chunk. A line longer than max_tokens is cut into pieces of itself. Headings inside
    ``` or ~~~ fences do not count. Blank lines at the edges of a chunk are left out of it.
    ``headings=False`` chunks plain text: no heading, chunks end at paragraphs where they can.
    """
    if max_tokens < _MIN_MAX_TOKENS:
        raise ValueError(
            f"chunk_markdown(): max_tokens must be at least {_MIN_MAX_TOKENS}, got {max_tokens}"
        )
    if not 0 <= overlap_tokens < max_tokens:
        raise ValueError(
            f"chunk_markdown(): overlap_tokens must be at least 0 and below max_tokens "
            f"({max_tokens}), got {overlap_tokens}"
        )
    lines = _LINE_BREAK.split(text)
    costs, hard, soft, paths = _scan(lines, counter(lines) if counter else None, headings)
    budget, overlap = max_tokens * 10, overlap_tokens * 10
    chunks = []
    for start, end in _windows(costs, budget, overlap, hard, soft):
        if costs[start] > budget:
            chunks.extend(
                _split_line(lines[start], start + 1, paths[start], budget, overlap, counter)
            )
        else:
            chunks.append(Chunk(start + 1, end, "\n".join(lines[start:end]), paths[start]))
    return chunks
