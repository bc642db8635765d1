"""No file crowds the results: a file's matching chunks as at most ``per_file`` hits, each
with its neighbouring matching chunks merged in (docs/architecture.md, "A file's chunks")."""

import json


def file_hits(rows: list, most: int) -> list:
    """The statement's rows (best first, by column name) as hits, in score order.

    A chunk next to one of its file's hits (just before or after one of the hit's chunks: a
    file's chunks have consecutive ids) joins that hit; another starts a new hit while its file
    has fewer than ``most``, else its lines go to the file's first hit. A memory (no file) is a
    hit of its own. Each hit is one row (``merged``)."""
    hits, files = [], {}
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
    """One row for a hit: its best row, with the lines from its first chunk's to its last's and
    their text (the lines between two neighbouring chunks are blank: a chunk's edges leave out
    only blank lines), the first chunk's heading, and the others' ranges in file order."""
    ordered = sorted(rows, key=lambda r: r["id"])
    first = ordered[0]
    end, text = first["end_line"], first["text"]
    for r in ordered[1:]:
        if r["end_line"] <= end:  # within the lines so far: a piece of the same long line
            continue
        if r["start_line"] <= end:  # overlapping lines: only the new ones
            lines = r["text"].split("\n")[end - r["start_line"] + 1 :]
            text += "\n" + "\n".join(lines)
        else:
            text += "\n" * (r["start_line"] - end) + r["text"]
        end = r["end_line"]
    return {
        **rows[0],
        "start_line": first["start_line"],
        "end_line": end,
        "heading": first["heading"],
        "text": text,
        "file_ranges": json.dumps(sorted(others)) if others else None,
    }
