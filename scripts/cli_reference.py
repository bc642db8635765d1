"""Writes docs/cli.md, the command-line reference, from the click commands themselves: each
command's ``--help`` as the installed ``hybridsql`` prints it (at 100 columns), in the order
the commands are listed. tests/test_docs.py compares the page with ``--help`` of every command.

    python scripts/cli_reference.py          # rewrites docs/cli.md
    python scripts/cli_reference.py --check  # exits 1, naming the page, when it is stale
"""

import os
import sys

import click

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "cli.md")
COLUMNS = "100"  # click wraps help to the terminal's width: the page and the test fix it

HEADER = """# Command-line reference

Every command of `hybridsql`, with its `--help` as the command prints it. Generated from the
click commands by `python scripts/cli_reference.py`; `tests/test_docs.py` fails when a
command's `--help` differs from this page. The README shows the commands at work; errors
are one line on stderr (`hybridsql: ...`, exit 1; a command line that cannot be parsed, exit 2).
"""


def commands(group: click.Command, path: tuple = ("hybridsql",)):
    """(path, command) of ``group`` and of every command below it, depth first, in the order
    ``--help`` lists them."""
    yield path, group
    if isinstance(group, click.Group):
        ctx = click.Context(group, info_name=path[-1])
        for name in group.list_commands(ctx):
            yield from commands(group.get_command(ctx, name), (*path, name))


def help_text(path: tuple) -> str:
    """What ``hybridsql PATH... --help`` prints, at COLUMNS columns."""
    from hybridsql.cli import cli

    os.environ["COLUMNS"] = COLUMNS
    command, ctx = cli, None
    for name in path:
        if ctx is not None:
            command = command.get_command(ctx, name)
        ctx = command.context_class(command, info_name=name, parent=ctx, **command.context_settings)
    return ctx.get_help() + "\n"


def page() -> str:
    from hybridsql.cli import cli

    parts = [HEADER]
    for path, _ in commands(cli):
        parts.append(f"\n## {' '.join(path)}\n\n```\n{help_text(path)}```\n")
    return "".join(parts)


def main() -> int:
    text = page()
    if "--check" in sys.argv[1:]:
        with open(PAGE, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{PAGE} is stale: run python scripts/cli_reference.py", file=sys.stderr)
                return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
