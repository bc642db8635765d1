"""What the command line shows a person at a terminal (JSON goes to pipes and ``--json``).

Text from files and from the index passes through ``visible`` first: an escape sequence in a
note must not clear the screen. Bold (query matches) follows NO_COLOR (https://no-color.org).
"""

import os
import re
import sys
from contextlib import ExitStack
from datetime import datetime

import click

from hybridsql.index import Progress
from hybridsql.search import visible


def styled() -> bool:
    """Whether to print bold: on a terminal, unless NO_COLOR is set to something."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def snippet_line(snippet: str, width: int = 200, bold: bool | None = None) -> str:
    """A snippet on one line: <mark> as bold (the marks dropped where ``bold`` is false; by
    default, see ``styled``), cut at ``width`` characters, control characters made visible."""
    out, shown, inside = [], 0, False
    bold = styled() if bold is None else bold
    for piece in re.split(r"(</?mark>)", snippet.replace("\n", " ")):
        if piece in ("<mark>", "</mark>"):
            inside = piece == "<mark>"
            if bold:
                out.append("\x1b[1m" if inside else "\x1b[0m")
        else:
            out.append(visible(piece[: width - shown]))
            shown += len(piece[: width - shown])
    return "".join(out) + ("\x1b[0m" if inside and bold else "")


def when(seconds: float | None) -> str:
    """Unix seconds as local time to the minute."""
    return "-" if seconds is None else datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")


def score_parts(r) -> str:
    """'vector 0.612, keyword 0.431' of a result or a memory hit ('-' where a side is missing)."""
    vector = "-" if r["vector_score"] is None else f"{r['vector_score']:.3f}"
    keyword = "-" if r["keyword_score"] is None else f"{r['keyword_score']:.3f}"
    return f"vector {vector}, keyword {keyword}"


def document_lines(results: list, notes: list) -> list:
    """A search of the memory files: a line per result with its place and score, then its
    snippet."""
    lines = [visible(f"note: {note}") for note in notes]
    if not results:
        lines.append("no results")
    for r in results:
        where = (
            f"{r['path']}:{r['start_line']}-{r['end_line']}"
            if r["kind"] == "document"
            else f"memory {r['id']}"
        )
        also = ", ".join(f"{start}-{end}" for start, end in r["other_ranges"])
        lines.append(
            f"{r['score']:.3f}  {visible(where)}  [{r['match_type']}: {score_parts(r)}, "
            f"decay {r['decay']:.2f}]" + (f" also lines {also}" if also else "")
        )
        lines.append("       " + snippet_line(r["snippet"]))
    return lines


def memory_head(m: dict) -> str:
    """'memory 12  tide · semantic · project · salience 0.50 · 2026-11-23 10:02' and its state."""
    project = visible(m["project"]) or "(no project)"
    state = " · superseded" if m["valid_until"] is not None else ""
    state += " · deleted" if m["deleted"] else ""
    return (
        f"memory {m['id']}  {project} · {m['sector']} · {visible(m['tier'])} · "
        f"salience {m['salience']:.2f} · {when(m['created_at'])}{state}"
    )


def memory_lines(m: dict) -> list:
    return [memory_head(m), "  " + visible(m["content"]).replace("\n", "\n  ")]


def hit_lines(found: dict) -> list:
    lines = [visible(f"note: {note}") for note in found["notes"]]
    if not found["results"]:
        lines.append("no memories found")
    for hit in found["results"]:
        m = hit["memory"]
        by = hit["superseded_by"]
        lines.append(
            f"{hit['score']:.3f}  {memory_head(m)}  [{hit['match_type']}: {score_parts(hit)}]"
        )
        lines.append("       " + snippet_line(hit["snippet"]))
        if by is not None:
            lines.append(f"       superseded by memory {by['id']}")
    return lines


def session_line(s: dict | None) -> str:
    if s is None:
        return "no session"
    ended = f", ended {when(s['ended_at'])}" if s["ended_at"] is not None else ", open"
    summary = f": {visible(s['summary'])}" if s["summary"] else ""
    project = visible(s["project"]) or "(no project)"
    return f"session {s['id']}  {project}, started {when(s['started_at'])}{ended}{summary}"


def timeline_lines(entries: list) -> list:
    lines = []
    for e in entries:
        m, s = e["memory"], e["session"]
        mark = "→" if e["offset"] == 0 else " "
        lines.append(f"{mark}{e['offset']:+3d}  {memory_head(m)}")
        lines.append("       " + visible(m["content"]).replace("\n", " ")[:200])
        if s is not None:
            lines.append(f"       in session {s['id']}")
    return lines


def context_lines(context: dict | None) -> list:
    if context is None:
        return ["no session used this memory"]
    return [
        session_line(context["session"]),
        f"  {context['usage']} it at {when(context['at'])}; the session holds "
        f"{context['memory_count']} memories",
    ]


def report_lines(report: dict, keyword_only: bool, left_out: str | None) -> list:
    """An indexing run: the counts, what was left out (discovery.left_out_line), then what was
    skipped and why."""
    lines = [
        f"{report['files_seen']} files: {report['files_indexed']} indexed, "
        f"{report['files_unchanged']} unchanged, {report['files_deleted']} deleted; "
        f"{report['chunks_written']} chunks written, {report['chunks_embedded']} embedded "
        f"in {report['seconds']:.1f}s"
    ]
    if keyword_only:
        lines.append("no embedding provider: the index is keyword-only")
    if left_out:
        lines.append(visible(left_out))
    lines += [visible(f"skipped {path}: {reason}") for path, reason in report["skipped"]]
    lines += [visible(f"warning {path}: {warning}") for path, warning in report["warnings"]]
    return lines


class Bar(Progress):
    """An indexing run's progress on stderr when it is a terminal: files done of all, chunks
    embedded so far (read from the run's report), time left, the file at hand."""

    def __init__(self, report):
        self.report = report
        self.stack = ExitStack()
        self.bar = None

    def start(self, total: int) -> None:
        if not sys.stderr.isatty():  # click's bar would still print its label once
            return
        self.bar = self.stack.enter_context(
            click.progressbar(
                length=total,
                label="indexing",
                file=sys.stderr,
                show_eta=False,  # said in words in the label: "about 0:00:12 left"
                show_pos=True,
                width=24,
                item_show_func=lambda label: label,
            )
        )

    def update(self, done: int, label: str) -> None:
        bar = self.bar
        if bar is None:
            return
        left = f", about {bar.format_eta()} left" if bar.pos and bar.eta_known else ""
        label = f"{self.report.chunks_embedded} chunks embedded{left}  {visible(label[:40])}"
        bar.update(done - bar.pos, label)

    def close(self) -> None:
        self.stack.close()


def batch_line(r: dict) -> str:
    """A watch's line for one batch of changes."""
    done = [f"{r['files_indexed']} indexed", f"{r['files_deleted']} deleted"]
    skipped = f", {len(r['skipped'])} skipped" if r["skipped"] else ""
    return (
        f"{datetime.now().strftime('%H:%M:%S')}  files: {', '.join(done)}{skipped}; "
        f"{r['chunks_embedded']} chunks embedded ({r['seconds']:.2f} s)"
    )


def watch_line(w: dict) -> str:
    """The line said when a watch stops."""
    return (
        f"watched {visible(w['folder'])} for {w['seconds']:.0f} s: {w['batches']} batches, "
        f"{w['files_indexed']} files indexed, {w['files_deleted']} deleted, "
        f"{w['chunks_embedded']} chunks embedded"
        + (f", {w['failures']} batches failed" if w["failures"] else "")
    )
