"""No file crowds the results: a file's matching chunks as at most ``per_file`` hits, each
with its neighbouring matching chunks merged in (docs/architecture.md, "A file's chunks")."""

import json


def file_hits(rows: list, most: int) -> list:
    """The statement's rows (best first, by column name) as hits, in score order.

    A chunk next to one of its file's hits (just before or after one of the hit's chunks: a
    file's chunks have consecutive ids) joins that hit; another starts a new hit while its file
    has fewer than ``most``, else its lines go to the file's first hit. A memory (no file) is a
    hit of its own. Each hit is one row (``merged``)."""
    hits: list = []
    files: dict = {}
    for row in rows:
        if row["file_id"] is None:
            hits.append(([row], []))
            continue
        own = files.setdefault(row["file_id"], [])
        near = next((h for h in own if any(abs(row["id"] - r["id"]) == 1 for r in h[0])), None)
        if near is not None:
            near[0].append(row)
        elif len(own) < most:
            own.append(([row], []))
            hits.append(own[-1])
        else:
            own[0][1].append([row["start_line"], row["end_line"]])
    return [merged(*hit) for hit in hits]


def merged(rows: list, others: list) -> dict:
    """One row for a hit: its best row (the first), whose text it starts with, so that its
    first lines are what matched. The neighbours after it in the file follow, as long as their
    text joins on (the lines between two of them are blank: a chunk's edges leave out only
    blank lines); the neighbours before it, and any that do not join, keep only their lines,
    which join ``others`` in file order."""
    best = rows[0]
    end, text = best["end_line"], best["text"]
    ordered = sorted(rows, key=lambda r: r["id"])
    apart = [[r["start_line"], r["end_line"]] for r in ordered if r["id"] < best["id"]]
    after = [r for r in ordered if r["id"] > best["id"]]
    for i, r in enumerate(after):
        joined = _joined(text, end, r)
        if joined is None:
            apart += [[r["start_line"], r["end_line"]] for r in after[i:]]
            break
        text, end = joined, r["end_line"]
    ranges = others + apart
    return {
        **best,
        "end_line": end,
        "text": text,
        "file_ranges": json.dumps(sorted(ranges)) if ranges else None,
    }


def _joined(text: str, end: int, row: dict) -> str | None:
    """``text``, which ends on line ``end``, with the next chunk's new text after it; None
    where the two do not join exactly."""
    start = row["start_line"]
    if start > end:  # lines after ours
        return text + "\n" * (start - end) + row["text"]
    if row["end_line"] > end:  # overlapping lines: only the new ones
        return text + "\n" + "\n".join(row["text"].split("\n")[end - start + 1 :])
    # The next piece of one long line: pieces overlap by whole units, so the longest end of
    # the text that begins the piece is their overlap. Without one, what lay between is unknown.
    piece = row["text"]
    at = text.find(piece[:1], max(0, len(text) - len(piece)))
    while at != -1:
        if piece.startswith(text[at:]):
            return text + piece[len(text) - at :]
        at = text.find(piece[:1], at + 1)
    return None
