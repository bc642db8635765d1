"""What the CLI takes from the environment and from --embedder, run as the installed command."""

import json
import os
import subprocess

from conftest import EXAMPLES, HYBRIDSQL, run_hybridsql


def test_hybridsql_db_stands_for_db(tmp_path):
    db = str(tmp_path / "env.db")
    indexed = run_hybridsql("index", EXAMPLES, "--embedder", "none", "--json", HYBRIDSQL_DB=db)
    assert indexed.returncode == 0, indexed.stderr
    assert json.loads(indexed.stdout)["files_indexed"] > 0
    found = run_hybridsql("search", "staging", "--embedder", "none", "--json", HYBRIDSQL_DB=db)
    assert json.loads(found.stdout)["results"]
    other = str(tmp_path / "other.db")  # --db comes first
    again = run_hybridsql("index", EXAMPLES, "--db", other, "--embedder", "none", HYBRIDSQL_DB=db)
    assert again.returncode == 0, again.stderr
    assert os.path.exists(other) and json.loads(again.stdout)["files_unchanged"] == 0


def test_without_db_or_hybridsql_db_the_cli_says_what_it_needs(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HYBRIDSQL_DB"}
    run = subprocess.run(
        [HYBRIDSQL, "search", "x"], capture_output=True, text=True, env=env, check=False
    )
    assert (run.returncode, run.stderr) == (
        2,
        "hybridsql search: Missing option '--db' (env var: 'HYBRIDSQL_DB')"
        " (see hybridsql search --help)\n",
    )


def test_a_malformed_embedder_is_refused_before_a_database_is_made(tmp_path):
    db = tmp_path / "never.db"
    run = run_hybridsql("index", EXAMPLES, "--db", str(db), "--embedder", "llm:")
    assert (run.returncode, run.stderr) == (
        2,
        "hybridsql index: Invalid value for '--embedder': expected auto, local, openai, none,"
        " openai:MODEL or llm:MODEL_ID, not 'llm:' (see hybridsql index --help)\n",
    )
    assert not db.exists()
