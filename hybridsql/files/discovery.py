"""Which files of a folder are indexed: ``--glob`` patterns, ``.gitignore`` files, what was left
out, and the safe opening of a path below the folder (no symbolic link is followed).

Patterns, in ``--glob`` and in ``.gitignore``, are gitignore patterns (pathspec's
``GitIgnoreSpec``, which follows git's own edge cases): one without a slash (``*.txt``) matches
the name at any depth, one with a slash (``notes/*.txt``) is relative to the folder indexed,
``docs/`` takes everything below ``docs``, and ``!`` leaves out what an earlier pattern took.
"""

import contextlib
import errno
import os
import stat
from collections import Counter
from typing import TYPE_CHECKING

from hybridsql.errors import IndexingError

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

MARKDOWN = (".md", ".markdown")
DEFAULT_GLOBS = ("*.md", "*.markdown")
# Never walked: tools' state and caches, not notes. A hidden folder (.git, .obsidian, .venv) is
# one too; .git is not counted as left out, since every repository has one.
SKIP_DIRS = {"node_modules", "__pycache__"}
MAX_GITIGNORE_BYTES = 1024 * 1024
# A file larger than this is left out of an index, and the run says so: `hybridsql index
# --max-file-bytes`, index_folder(max_file_bytes=...), watch_folder(max_file_bytes=...).
MAX_FILE_BYTES = 20 * 1024 * 1024
SHOWN_EXTENSIONS = 5  # the left-out line names the commonest extensions, then "others"


def is_markdown(path: str) -> bool:
    """Whether a file is chunked as markdown (headings); any other text is plain lines."""
    return path.lower().endswith(MARKDOWN)


def glob_spec(globs) -> "GitIgnoreSpec":
    """The patterns that choose the files, matched without regard to case (``*.md`` takes
    ``README.MD``, as before patterns existed). Raises IndexingError for none or a bad one."""
    from pathspec import GitIgnoreSpec  # here: a command that indexes nothing never loads it

    globs = [globs] if isinstance(globs, str) else list(globs)
    if not any(g.strip() and not g.strip().startswith("!") for g in globs):
        raise IndexingError("no glob pattern chooses any file: give at least one, like '*.md'")
    for g in globs:
        try:
            GitIgnoreSpec.from_lines([g])
        except ValueError as e:  # pathspec's GitWildMatchPatternError
            raise IndexingError(f"invalid glob pattern {g!r}: {e}") from e
    return GitIgnoreSpec.from_lines([g.lower() for g in globs])


def ignored(rules: list, rel: str, is_dir: bool) -> bool:
    """Whether the .gitignore files in ``rules`` [(folder prefix, spec), the root's first]
    leave ``rel`` out: as in git, the deepest file with a matching pattern decides, and in it
    the last matching pattern."""
    decision = False
    for prefix, spec in rules:
        found = spec.check_file(rel[len(prefix) :] + ("/" if is_dir else "")).include
        if found is not None:
            decision = found
    return decision


def read_gitignore(root: str, rel: str, warnings: list):
    """The rules of the .gitignore at ``rel``, or None. It is opened as files to index are (no
    link followed, a regular file); one that cannot be read is passed over with a warning."""
    try:
        fd = open_inside(root, rel, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        warnings.append([rel, f"not read: {link_reason(root, e) or e.strerror}"])
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            warnings.append([rel, "not read: not a regular file"])
            return None
        lines = f.read(MAX_GITIGNORE_BYTES).decode("utf-8", errors="replace").splitlines()
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(lines)


# How the reasons of what cannot be read start: what was indexed from there stays indexed.
FOLDER_NOT_READ = "folder not read: "
UNREADABLE = "unreadable: "


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for a skipped file's reason."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((kind for test, kind in kinds if test(mode)), "not a regular file")


def not_regular(mode: int) -> str:
    return f"not a regular file ({file_kind(mode)})"


def link_skipped(rel: str) -> str:
    return f"{rel} is a symbolic link (links are not followed)"


def discover(
    root: str,
    vanished: list | None = None,
    globs=DEFAULT_GLOBS,
    gitignore: bool = True,
    report=None,
    skipped: list | None = None,
):
    """The files under ``root`` that ``globs`` match and no .gitignore leaves out, as sorted
    relative paths ('/'-separated).

    Hidden folders, node_modules, __pycache__, symbolic links and anything but regular files (a
    named pipe would block the read for ever) are passed over, and so is a folder that a
    negated pattern takes ('!drafts/'). .gitignore files apply below their folder, in or out of
    a git repository; a folder they leave out is not walked.
    ``report`` (an IndexReport), when given, gets ``left_out`` counts and the warnings of
    unreadable .gitignore files. ``skipped`` gets [path, reason] for each link, named pipe,
    socket or device that the patterns take, each link to a folder, and each folder or file
    that cannot be read (its reason starting with FOLDER_NOT_READ or UNREADABLE). Files
    deleted while the folder is walked are left out, their relative paths added to
    ``vanished``.
    Raises IndexingError when ``root`` itself cannot be read.
    """
    spec = glob_spec(globs)
    not_matching, gitignored, folders, negated = Counter(), Counter(), 0, 0
    warnings = report.warnings if report is not None else []
    skipped = [] if skipped is None else skipped
    rules = {"": []}  # a folder's .gitignore rules, its parents' included
    found = []

    def unreadable(error: OSError) -> None:
        rel = os.path.relpath(error.filename, root).replace(os.sep, "/")
        if rel == ".":
            raise IndexingError(f"{root} cannot be read: {error.strerror}")
        if not isinstance(error, FileNotFoundError):  # deleted meanwhile: nothing to say
            skipped.append([rel, FOLDER_NOT_READ + error.strerror])

    for folder, dirs, files in os.walk(root, onerror=unreadable):
        here = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if here == "." else here + "/"
        mine = rules.pop(prefix)
        if gitignore and ".gitignore" in files:
            own = read_gitignore(root, prefix + ".gitignore", warnings)
            mine = mine + [(prefix, own)] if own is not None else mine
        walked = []
        for d in sorted(dirs):
            if d.startswith(".") or d in SKIP_DIRS:
                folders += d != ".git"
            elif spec.check_file((prefix + d + "/").lower()).include is False:
                negated += 1  # '!drafts/' leaves out the folder, not only what '*' takes there
            elif gitignore and ignored(mine, prefix + d, is_dir=True):
                gitignored["folders"] += 1
            elif os.path.islink(os.path.join(folder, d)):  # os.walk would not enter it
                skipped.append([prefix + d, link_skipped(prefix + d)])
            else:
                walked.append(d)
                rules[prefix + d + "/"] = mine
        dirs[:] = walked
        for name in sorted(files):
            rel = prefix + name
            if gitignore and name == ".gitignore":
                continue  # read as rules, not left out
            if not spec.match_file(rel.lower()):
                not_matching[os.path.splitext(name)[1].lower()] += 1
                continue
            if gitignore and ignored(mine, rel, is_dir=False):
                gitignored["files"] += 1
                continue
            try:
                mode = os.lstat(os.path.join(folder, name)).st_mode
            except FileNotFoundError:
                if vanished is not None:
                    vanished.append(rel)
                continue
            except OSError as e:  # a folder that can be listed but not searched (no x bit)
                skipped.append([rel, UNREADABLE + e.strerror])
                continue
            if stat.S_ISREG(mode):
                found.append(rel)
            elif stat.S_ISLNK(mode):  # to a file, dangling, or a loop
                skipped.append([rel, link_skipped(rel)])
            else:
                skipped.append([rel, not_regular(mode)])
    if report is not None:
        report.left_out = {
            "not_matching": dict(not_matching.most_common()),
            "folders_not_matching": negated,
            "gitignored_files": gitignored["files"],
            "gitignored_folders": gitignored["folders"],
            "folders_not_walked": folders,
        }
    return sorted(found)


def left_out_line(report) -> str | None:
    """The terminal's line on what a run left out, or None when nothing was."""
    out = report.left_out
    other = sum(out["not_matching"].values())
    if not report.files_seen and other:
        top = next(iter(out["not_matching"]))
        hint = f": pass --glob '*{top}'" if top else ""
        return (
            f"0 files matched {', '.join(report.globs)}; {plural(other, 'other file')} "
            f"({by_extension(out['not_matching'])}){hint}"
        )
    parts = []
    if other:
        parts.append(
            f"{plural(other, 'file')} not matching --glob ({by_extension(out['not_matching'])})"
        )
    if out["folders_not_matching"]:
        parts.append(f"{plural(out['folders_not_matching'], 'folder')} left out by --glob")
    ignored = [
        plural(n, noun)
        for n, noun in ((out["gitignored_files"], "file"), (out["gitignored_folders"], "folder"))
        if n
    ]
    if ignored:
        parts.append(f"{' and '.join(ignored)} ignored by .gitignore")
    if out["folders_not_walked"]:
        parts.append(f"{plural(out['folders_not_walked'], 'folder')} not walked (hidden, caches)")
    return "left out: " + ", ".join(parts) if parts else None


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def by_extension(counts: dict) -> str:
    """'.txt 10, .pdf 2, others 3': counts by extension, the commonest first."""
    shown = list(counts.items())[:SHOWN_EXTENSIONS]
    text = ", ".join(f"{ext or 'no extension'} {n}" for ext, n in shown)
    rest = sum(counts.values()) - sum(n for _, n in shown)
    return text + (f", others {rest}" if rest else "")


def open_inside(root: str, rel: str, flags: int, mode: int = 0o644, make_dirs: bool = False):
    """A file descriptor for ``root``/``rel`` ('/'-separated) that follows no symbolic link
    below ``root``: each folder on the way is opened with O_NOFOLLOW (and made first when
    ``make_dirs``), then the file. A link raises OSError ELOOP, a file where a folder should
    be ENOTDIR; the error's filename is the part of ``rel`` that failed."""
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        try:
            if make_dirs and not last:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
            how = flags if last else os.O_RDONLY | os.O_DIRECTORY
            child = os.open(part, how | os.O_NOFOLLOW, mode, dir_fd=fd)
        except OSError as e:
            e.filename = "/".join(parts[: i + 1])
            raise
        finally:
            os.close(fd)
        fd = child
    return fd


def link_reason(root: str, error: OSError) -> str | None:
    """Why ``open_inside`` refused a path, when it met a symbolic link or a file where a folder
    should be; None for other errors."""
    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
        return None
    if os.path.islink(os.path.join(root, error.filename)):
        return f"{error.filename} is a symbolic link (links are not followed)"
    return f"{error.filename} is not a folder"


class Progress:
    """What index_folder tells as it goes: the number of files (start), each step of the work
    (update: before a file is read, after one is written, after a batch of vectors) and the
    end (close). Between updates no transaction is open. This one tells no one; the command
    line's bar (terminal.Bar) and the MCP server's background run (mcp_server.Indexing) are
    others."""

    def start(self, total: int) -> None:
        """``total`` files were found."""

    def update(self, done: int, label: str) -> None:
        """``done`` files are finished (written, unchanged or skipped); ``label`` is the file at
        hand (may be empty). The run's report holds the other counts as they are now."""

    def work(self, done: int, total: int) -> None:
        """``done`` bytes of the ``total`` the run must read and embed are done (files whose
        size or modification time changed, and new ones; one found unchanged leaves
        ``total``): what the time left is reckoned from."""

    def close(self) -> None:
        """The run ended (or failed)."""
