"""What the command line shows a person at a terminal (JSON goes to pipes and ``--json``).

Text from files, from the index and from the user passes through ``visible`` first: an escape
sequence in a note must not clear the screen, nor a line break in a file name start what looks
like another result. Where text is shown on one line (snippets) its line breaks are spaces;
where on several (a memory), each of its lines is one of the output's, indented. Bold (query
matches) follows NO_COLOR (https://no-color.org).
"""

import os
import re
import sys
import time
from contextlib import ExitStack
from datetime import datetime

import click

from hybridsql.files.discovery import Progress
from hybridsql.search import SearchOptions, visible

# What a memory search on the command line runs with (MemoryStore's own SearchOptions keep these).
_DEFAULTS = SearchOptions()

# Where str.splitlines() breaks a line: \r\n, \n, \r, \v, \f, \x1c-\x1e, NEL, U+2028, U+2029.
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` on one terminal line: line breaks as spaces, other controls escaped."""
    return visible(_LINE_BREAK.sub(" ", text))


def styled() -> bool:
    """Whether to print bold: on a terminal, unless NO_COLOR is set to something."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def snippet_line(snippet: str, width: int = 200, bold: bool | None = None) -> str:
    """A snippet on one line: <mark> as bold (the marks dropped where ``bold`` is false; by
    default, see ``styled``), cut at ``width`` characters, control characters made visible."""
    out, shown, inside = [], 0, False
    bold = styled() if bold is None else bold
    for piece in re.split(r"(</?mark>)", _LINE_BREAK.sub(" ", snippet)):
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


def score_parts(r, floor: float | None = None, pool: int = _DEFAULTS.candidate_pool):
    """'vector 0.612, keyword 0.431' of a result or a memory hit ('-' where a side is missing).

    A result its words alone found (``keyword``) may still have a vector, whose cosine the
    statement computed: it says why that vector did not make it a vector match, its cosine
    under the floor (``vector_floor``: noise, it adds nothing) or its rank past the
    ``candidate_pool`` nearest; ``floor`` None: the search's floor is not known here, and the
    line says which of the two it is not."""
    vector = "-" if r["vector_score"] is None else f"{r['vector_score']:.3f}"
    if r["match_type"] == "keyword" and r["vector_score"] is not None:
        if floor is None:
            vector += f" under the vector floor or not among the {pool} nearest"
        elif r["vector_score"] < floor:
            vector += f" under the vector floor {floor:g}"
        else:
            vector += f" not among the {pool} nearest"
    keyword = "-" if r["keyword_score"] is None else f"{r['keyword_score']:.3f}"
    return f"vector {vector}, keyword {keyword}"


def document_lines(results: list, notes: list, opts: SearchOptions = _DEFAULTS) -> list:
    """A search of the memory files: a line per result with its place and score, then its
    snippet; ``opts``, the search's options (its vector floor and pool, see score_parts)."""
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
            f"{r['score']:.3f}  {visible(where)}  [{r['match_type']}: "
            f"{score_parts(r, opts.vector_floor, opts.candidate_pool)}, "
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
        f"memory {m['id']}  {project} · {visible(m['sector'])} · {visible(m['tier'])} · "
        f"salience {m['salience']:.2f} · {when(m['created_at'])}{state}"
    )


def memory_lines(m: dict) -> list:
    return [memory_head(m), *("  " + visible(line) for line in m["content"].splitlines() or [""])]


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
    summary = f": {one_line(s['summary'])}" if s["summary"] else ""
    project = visible(s["project"]) or "(no project)"
    return f"session {s['id']}  {project}, started {when(s['started_at'])}{ended}{summary}"


def timeline_lines(entries: list) -> list:
    lines = []
    for e in entries:
        m, s = e["memory"], e["session"]
        mark = "→" if e["offset"] == 0 else " "
        lines.append(f"{mark}{e['offset']:+3d}  {memory_head(m)}")
        lines.append("       " + one_line(m["content"][:200]))
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


class Eta:
    """The time left of an indexing run: the bytes of work left (Progress.work) at the rate of
    the bytes done since the first were done. By bytes, not files: a folder's files range from a
    line to megabytes. From the first bytes done, not from the run's start: the start pays for
    the model's load and the first batch's fill, which the rest of the run does not. Over the
    rest of the run, not its last seconds: a batch's files are written at once, so a rate over a
    few seconds jumps with each batch."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.first = None  # (when, bytes done) at the first work done
        self.done = self.total = 0

    def work(self, done: int, total: int) -> None:
        if self.first is None and done > 0:
            self.first = (self.clock(), done)
        self.done, self.total = done, total

    def left(self) -> float | None:
        """Seconds left, or None until work has been done since the first (or when all is)."""
        if self.first is None or self.done >= self.total:
            return None
        since, done = self.first
        if self.done <= done:
            return None
        return (self.clock() - since) * (self.total - self.done) / (self.done - done)


def clock_time(seconds: float) -> str:
    """'0:02:05' of 125 seconds."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{secs:02}"


class Bar(Progress):
    """An indexing run's progress on stderr when it is a terminal: files finished of all, chunks
    embedded so far (read from the run's report), time left (Eta), the file at hand. Its last frame
    has the counts of the run's summary."""

    def __init__(self, report):
        self.report = report
        self.stack = ExitStack()
        self.bar = None
        self.eta = Eta()

    def start(self, total: int) -> None:
        if not sys.stderr.isatty():  # click's bar would still print its label once
            return
        self.bar = self.stack.enter_context(
            click.progressbar(
                length=total,
                label="indexing",
                file=sys.stderr,
                show_eta=False,  # said in words in the label: "about 0:00:12 left" (Eta)
                show_pos=True,
                width=24,
                item_show_func=lambda label: label,
            )
        )

    def update(self, done: int, label: str) -> None:
        bar = self.bar
        if bar is None:
            return
        seconds = self.eta.left()
        left = f", about {clock_time(seconds)} left" if seconds is not None else ""
        bar.current_item = (
            f"{self.report.chunks_embedded} chunks embedded{left}  {visible(label[:40])}".rstrip()
        )
        if done > bar.pos:
            bar.update(done - bar.pos)
        else:  # the counts changed, not the files done: click's update would not draw
            bar.render_progress()

    def work(self, done: int, total: int) -> None:
        self.eta.work(done, total)

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
