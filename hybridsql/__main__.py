"""``python -m hybridsql`` and the ``hybridsql`` command (cli.py). ``--version`` alone is answered
here, before click and every command's options are imported and built: it needs none of them."""

import sys


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        from hybridsql.db._native import version_line

        print(version_line())
        return 0
    from hybridsql.cli import main as run

    return run()


if __name__ == "__main__":
    raise SystemExit(main())
