"""The ``hybridsql`` command."""

import argparse
import sys

from hybridsql.errors import HybridSQLError
from hybridsql.extension import loadable_path


def cmd_path(args) -> int:
    print(loadable_path())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hybridsql", description="Hybrid keyword + vector search inside SQLite."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "path",
        help="print the path of the loadable SQLite extension",
        description="Print the path of the loadable SQLite extension.",
        epilog='example: sqlite3 mem.db ".load $(hybridsql path)" "select hybrid_score(0.8, -4.2)"',
    )
    p.set_defaults(func=cmd_path)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HybridSQLError as e:
        print(f"hybridsql: {e}", file=sys.stderr)
        return 1
