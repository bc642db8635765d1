"""Each release library loaded by the real program of its platform, on this x86_64 Linux machine:
the aarch64 ones by sqlite3 shells under qemu-user (Debian's own glibc shell, and a musl one),
the musl x86_64 one by a musl-linked shell, the Windows DLL by a zig-built sqlite3.exe under
wine. A fixed set of queries gives the answers of the native build in the stock sqlite3 shell,
and every SIMD path the top k of float64 brute force.

Slow the first time (the shells are built or fetched into build/platforms, then reused), so
deselected from the plain suite: `pytest -m platforms tests/test_platforms.py` runs it, as
.ci/run does. Without the emulators it skips, saying what to install, except under CI=true,
where it fails.
"""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import HYBRIDSQL, ROOT, read_scifact

import hybridsql

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import platforms  # noqa: E402

pytestmark = pytest.mark.platforms

STOCK = shutil.which("sqlite3")
NATIVE = "native"  # the reference: the installed library (the system compiler's) in STOCK
DIMS = (1, 3, 7, 8, 15, 16, 17, 33, 384)


def has_avx2_fma():
    """Whether this CPU has AVX2 and FMA, as the kernel reports them (the dispatcher's answer
    comes from cpuid, this from /proc/cpuinfo)."""
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split()
    return "avx2" in flags and "fma" in flags


X86_BEST = "avx2+fma" if has_avx2_fma() else "sse2"
# The path each build must choose by itself on this machine (aarch64 always has NEON).
CHOSEN = {
    NATIVE: X86_BEST,
    "linux-x86_64": X86_BEST,
    "musllinux-x86_64": X86_BEST,
    "windows-x86_64": X86_BEST,
    "linux-aarch64": "neon",
    "musllinux-aarch64": "neon",
}
# Builds whose answers must equal the native build's to the bit: the x86_64 ones, which run the
# same SIMD path, and whose compilers cannot fuse a * b + c into an FMA outside it (baseline x86_64
# has none). The aarch64 builds differ in the last bits (NEON's summation order; compilers fuse
# there, in hybrid_score and in SQLite's own bm25), so they are held to 1e-12.
EXACT = {"linux-x86_64", "musllinux-x86_64", "windows-x86_64"}


def require(missing):
    """Skips, saying what to install, if anything is missing; fails instead under CI=true."""
    if missing:
        message = "the emulators are missing; install: " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def shells():
    """{platform: (argv, env, library)}: the native reference, the zig-built x86_64 glibc library
    in the stock shell, and the emulated shells with their libraries, all built here."""
    require(platforms.emulators_missing())
    if STOCK is None:
        pytest.fail("the stock sqlite3 shell is missing (apt-get install sqlite3)")
    emulated = platforms.emulated_shells()
    found = {NATIVE: ((STOCK,), {}, hybridsql.loadable_path())}
    for name in CHOSEN:
        if name == NATIVE:
            continue
        library = platforms.build_library(
            platforms.target(name), os.path.join(platforms.EMULATION, "lib", name)
        )
        shell = emulated.get(name)
        argv, env = (shell.argv, dict(shell.env)) if shell else ((STOCK,), {})
        found[name] = (argv, env, library)
    with platforms.wine_server():
        yield found


def run(shell, script, simd=None, db=":memory:"):
    """Runs ``script`` in a shell after .load on ``db``; the rows of each statement, as parsed
    JSON."""
    argv, env, library = shell
    env = {**os.environ, **env}
    env.pop("HYBRIDSQL_SIMD", None)
    if simd:
        env["HYBRIDSQL_SIMD"] = simd
    proc = subprocess.run(
        [*argv, "-bail", "-json", "-cmd", f".load {library}", db],
        input=script,
        capture_output=True,
        text=True,
        env=env,
        # a hang, not a slow emulator: under qemu at load 8 the aarch64 shell's eight windows
        # of MiniLM took over 10 minutes (about 4 on a quiet machine)
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    blocks, decoder, at = [], json.JSONDecoder(), 0
    out = proc.stdout.strip()
    while at < len(out):
        rows, at = decoder.raw_decode(out, at)
        blocks.append(rows)
        while at < len(out) and out[at].isspace():
            at += 1
    return blocks


def blob(v):
    return "X'" + np.asarray(v, np.float32).tobytes().hex() + "'"


def quote(text):
    return "'" + text.replace("'", "''") + "'"


def fixed_script():
    """The fixed queries: vector_index k-nearest with partition, metadata and rowid filters,
    cosine_topk, the score functions, the vector encodings, bm25() and bm25_candidate() over
    SciFact in FTS5. Every statement returns at least one row."""
    rng = np.random.default_rng(24)
    vectors = rng.standard_normal((240, 16)).astype(np.float32)
    projects = ["a", "b", "c"]
    lines = [
        "create virtual table v using vector_index(id integer primary key, e float[16],"
        " project text partition key, n integer, w real);",
        "create table plain(id integer primary key, e blob, project text);",
        "create virtual table f using fts5(text, tokenize='porter unicode61');",
    ]
    for i, vec in enumerate(vectors, start=1):
        # half the rows as JSON text, half as float32 BLOBs: both encodings of Requirement 1
        e = quote(json.dumps([float(x) for x in vec])) if i % 2 else blob(vec)
        values = f"{i}, {e}, '{projects[i % 3]}', {i * 7 % 100}, {i / 240}"
        lines.append(f"insert into v(id, e, project, n, w) values ({values});")
        lines.append(f"insert into plain values ({i}, vector_blob({e}), '{projects[i % 3]}');")
    for i, d in enumerate(read_scifact("corpus", 300), start=1):
        lines.append(
            f"insert into f(rowid, text) values ({i}, {quote(d['title'] + ' ' + d['text'])});"
        )
    q, r = (
        blob(rng.standard_normal(16)),
        quote(json.dumps(rng.standard_normal(16).round(4).tolist())),
    )
    knn = "select rowid, score from v where e match {q} and k = {k}{where};"
    for where in (
        "",
        " and project = 'b'",
        " and project in ('a', 'c') and n >= 30",
        " and n < 50 and w > 0.25",
        " and rowid between 20 and 150",
        " and rowid in (3, 4, 5, 70, 71, 200, 239)",
        " and id != 7 and project != 'c'",
        " and project is not null and n is not 14",
    ):
        lines.append(knn.format(q=q, k=10, where=where))
        lines.append(knn.format(q=r, k=5, where=where))
    lines += [
        f"select cosine_topk({q}, 10, id, e) as top from plain;",
        f"select cosine_topk({r}, 7, id, e) as top from plain where project = 'a';",
        f"select id, cosine_similarity({q}, e) as c from plain where id % 40 = 1;",
        "select cosine_similarity('[1,0]', '[1,1]') as c, cosine_similarity('[0,0]', '[1,2]') as z;",
        "select vector_json(vector_blob('[0.1, 2, -3.5e-7, 1e30]')) as j,"
        " hex(vector_blob('[0.1, 2]')) as h, vector_json(e) as e from plain where id = 2;",
        "select bm25_score(-4.2) as a, bm25_score(-12.5, 1) as b, bm25_score(null) as c,"
        " bm25_score(3) as d;",
        "select hybrid_score(0.8, -4.2) as a, hybrid_score(0.31, -17.25, 0.5, 0.5) as b,"
        " hybrid_score(null, -8, 0.6, 0.4, 3) as c;",
        "select temporal_decay('memory/2026-10-22.md', '2026-11-21') as a,"
        " temporal_decay('x\\2025-02-28.md', '2026-11-21T13:45:10.25+02:00', 7) as b,"
        " temporal_decay('2024-02-29.md', 1790000000) as c, temporal_decay('notes.md', 0) as d;",
        "select rowid, bm25(f) as r from f where f match 'cancer OR cell' order by bm25(f) limit 10;",
        "select id, r from (select rowid as id, bm25_candidate(f, 10) as r from f"
        " where f match 'protein AND (gene OR expression)') where r is not null order by r limit 10;",
        "select rowid, hybrid_score(0.5, bm25(f)) as h from f where f match 'risk'"
        " order by h desc, rowid limit 5;",
        "select hybridsql_version() as version;",
    ]
    return "\n".join(lines) + "\n"


def same(got, want, tolerance):
    """got equals want, numbers within tolerance (0: to the bit); JSON text read as JSON."""
    if isinstance(want, str) and want.startswith("[") and isinstance(got, str):
        got, want = json.loads(got), json.loads(want)
    if isinstance(want, float) or isinstance(got, float):
        return got == want or math.isclose(got, want, rel_tol=tolerance, abs_tol=tolerance)
    if isinstance(want, list | tuple):
        return len(got) == len(want) and all(
            same(g, w, tolerance) for g, w in zip(got, want, strict=True)
        )
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k], tolerance) for k in want)
    return got == want


@pytest.fixture(scope="module")
def native_answers(shells):
    return run(shells[NATIVE], fixed_script())


@pytest.mark.parametrize("name", [n for n in CHOSEN if n != NATIVE])
def test_the_fixed_queries_give_the_native_answers(shells, native_answers, name):
    answers = run(shells[name], fixed_script())
    tolerance = 0.0 if name in EXACT else 1e-12
    assert len(answers) == len(native_answers)
    for i, (got, want) in enumerate(zip(answers, native_answers, strict=True)):
        assert same(got, want, tolerance), f"statement {i}: {got} != {want}"
    # the top k is the same rows in the same order, whatever the tolerance on scores
    assert [[r.get("id", r.get("rowid")) for r in a] for a in answers] == [
        [r.get("id", r.get("rowid")) for r in a] for a in native_answers
    ]


@pytest.mark.parametrize("name", list(CHOSEN))
def test_each_build_chooses_its_best_simd_path(shells, name):
    (rows,) = run(shells[name], "select hybridsql_simd() as simd;\n")
    assert rows == [{"simd": CHOSEN[name]}]


def brute_force_script(rng):
    """For each of DIMS, a table of random rows and three queries: the script, and for each
    query the (ids, scores) float64 brute force gives, best first, ties by id."""
    lines, want = [], []
    for d in DIMS:
        rows = rng.standard_normal((300, d)).astype(np.float32)
        lines.append(f"create virtual table t{d} using vector_index(e float[{d}]);")
        lines.append(f"create table p{d}(id integer primary key, e blob);")
        for i, v in enumerate(rows, start=1):
            lines.append(f"insert into t{d}(rowid, e) values ({i}, {blob(v)});")
            lines.append(f"insert into p{d} values ({i}, {blob(v)});")
        r64 = rows.astype(np.float64)
        for q in rng.standard_normal((3, d)).astype(np.float32):
            q64 = q.astype(np.float64)
            scores = np.clip((r64 @ q64) / np.sqrt((q64 @ q64) * (r64 * r64).sum(axis=1)), -1, 1)
            order = sorted(range(len(rows)), key=lambda i: (-scores[i], i))[:10]
            top = ([i + 1 for i in order], [float(scores[i]) for i in order])
            lines.append(f"select rowid as id, score from t{d} where e match {blob(q)} and k = 10;")
            lines.append(f"select cosine_topk({blob(q)}, 10, id, e) as top from p{d};")
            want += [top, top]
    return "\n".join(lines) + "\n", want


@pytest.fixture(scope="module")
def brute_force():
    return brute_force_script(np.random.default_rng(2024))


@pytest.mark.parametrize(
    "name, simd, path",
    [
        ("linux-x86_64", None, X86_BEST),
        ("linux-x86_64", "sse2", "sse2"),
        ("linux-x86_64", "generic", "generic"),
        ("linux-aarch64", None, "neon"),
        ("linux-aarch64", "generic", "generic"),
        ("musllinux-x86_64", None, X86_BEST),
        ("musllinux-aarch64", None, "neon"),
        ("windows-x86_64", None, X86_BEST),
    ],
)
def test_every_simd_path_finds_the_brute_force_top_k(shells, brute_force, name, simd, path):
    script, want = brute_force
    answers = run(shells[name], "select hybridsql_simd() as simd;\n" + script, simd)
    assert answers[0] == [{"simd": path}]
    assert len(answers) == len(want) + 1
    for i, (block, (ids, scores)) in enumerate(zip(answers[1:], want, strict=True)):
        rows = block
        if "top" in block[0]:  # cosine_topk's JSON
            rows = [{"id": r[0], "score": r[1]} for r in json.loads(block[0]["top"])]
        assert [r["id"] for r in rows] == ids, f"query {i} (dims {DIMS[i // 6]})"
        assert np.allclose([r["score"] for r in rows], scores, rtol=0, atol=1e-12)


def test_the_macos_libraries_build():
    """No Mac runs them here (docs/platforms.md says so); they must at least build."""
    require([m for m in platforms.emulators_missing() if m.startswith("ziglang")])
    for name in ("macos-x86_64", "macos-arm64"):
        path = platforms.build_library(
            platforms.target(name), os.path.join(platforms.EMULATION, "lib", name)
        )
        assert os.path.getsize(path) > 0


EMBEDDED = [
    "How do I roll back a failed deploy?",
    "Déjà vu: naïve café résumé, 数据库迁移 and émojis 🚀",
    "the deploy was rolled back " * 400,  # more than eight windows
    "",
]


@pytest.fixture(scope="module")
def beside(shells, tmp_path_factory):
    """The model file put beside each library (as a bare library's user puts it), and an
    environment in which the library finds no other."""
    from hybridsql.embedding import engine

    if not engine.model_path().is_file():
        engine.write_model()
    for _, _, library in shells.values():
        target = os.path.join(os.path.dirname(library), engine.MODEL_FILE)
        if os.path.dirname(library) != os.path.dirname(hybridsql.loadable_path()):
            shutil.copyfile(engine.model_path(), target)
    empty = tmp_path_factory.mktemp("no-model-here")
    return {"HYBRIDSQL_CACHE_DIR": str(empty), "HYBRIDSQL_MODEL": ""}


def embed_script():
    return "".join(f"select hex(embed({quote(t)})) as v;\n" for t in EMBEDDED)


@pytest.mark.parametrize("name", [n for n in CHOSEN if n != NATIVE])
def test_embed_gives_the_native_vector(shells, beside, name):
    """embed() in each platform's shell, its model file found beside its library (dladdr,
    dl_iterate_phdr, GetModuleFileNameW; pread, ReadFile): the native vector within 1e-5 a
    component, the zero vector where the native one is."""
    from hybridsql.embedding import engine

    native = run(shells[NATIVE], embed_script())
    argv, env, library = shells[name]
    got = run((argv, {**env, **beside}, library), embed_script())
    for text, (mine,), (want,) in zip(EMBEDDED, got, native, strict=True):
        a = np.frombuffer(bytes.fromhex(mine["v"]), dtype="<f4")
        b = np.frombuffer(bytes.fromhex(want["v"]), dtype="<f4")
        assert a.shape == b.shape == (384,), text[:40]
        assert np.abs(a - b).max() <= 1e-5, text[:40]
    assert engine.MODEL_FILE in os.listdir(os.path.dirname(library))


# fuzz/model_seed.py's small models of format 2: int8 weights; and Q4_0 matrices and word
# table, float32 positions from an offset of 2, CLS pooling, no L2, a query and a document prefix.
SEEDS = ("tiny-as-written", "tiny-q4")


def seed_script():
    """Each seed chosen by its bytes (hybridsql_model(X'...')), then each text embedded as a
    query and as a document."""
    out = []
    for seed in SEEDS:
        with open(os.path.join(ROOT, "fuzz", "corpus", "model", seed), "rb") as f:
            out.append(f"select hybridsql_model(X'{f.read()[1:].hex()}') as id;\n")
        for text in EMBEDDED[:2] + ["how do the deploy freeze " * 30]:  # its last: two windows
            out += [
                f"select hex(embed({quote(text)}, '{r}')) as v;\n" for r in ("query", "document")
            ]
    return "".join(out)


@pytest.mark.parametrize("name", [n for n in CHOSEN if n != NATIVE])
def test_each_weight_type_gives_the_native_vector(shells, name):
    """The int8 and the Q4_0 kernels of each platform's path (NEON on aarch64 under qemu): the
    native vector of each role within 1e-5 a component."""
    native = run(shells[NATIVE], seed_script())
    got = run(shells[name], seed_script())
    assert len(got) == len(native) == 2 * 7
    read = []
    for mine, want in zip(got, native, strict=True):
        if "id" in want[0]:
            assert mine == want == [{"id": "tiny-fuzz-seed"}]
            continue
        a = np.frombuffer(bytes.fromhex(mine[0]["v"]), dtype="<f4")
        b = np.frombuffer(bytes.fromhex(want[0]["v"]), dtype="<f4")
        assert a.shape == b.shape == (32,)
        assert np.abs(a - b).max() <= 1e-5
        read.append(bool(b.any()))
    # The seeds' small vocabulary reads the English texts; the second (accents, CJK, emoji) is
    # mostly unknown to it: the zero vector, on every platform alike.
    assert read == [True, True, False, False, True, True] * 2


# What Alpine runs: the musl libraries, in musl-linked shells, with nothing of Python. An index
# made by `hybridsql index` has its vectors written again by the library's embed() of each chunk,
# then the hybrid statement of `hybridsql search --explain` runs from the query's text.
REINDEX = """
delete from vectors;
insert into vectors(chunk_id, vector, model_id, kind)
  select id, embed(text, 'document'), 'all-MiniLM-L6-v2-int8', kind from chunks;
select chunk_id, hex(vector) as v from vectors order by chunk_id;
"""


def test_musl_indexes_and_searches_with_the_library_alone(shells, beside, example_db, tmp_path):
    """onnxruntime has no musllinux wheel; the local model needs none: the musl library embeds
    every chunk as the Python index did (its LocalProvider, within 1e-5 a component), and the
    hybrid statement from a text then gives the CLI's top 10. On x86_64, Alpine's common case:
    under qemu the aarch64 shell would take minutes for the index's 93 chunks, and its vectors
    are test_embed_gives_the_native_vector's."""
    name = "musllinux-x86_64"
    db = str(tmp_path / "musl.db")
    shutil.copyfile(example_db, db)
    conn = hybridsql.connect(db)
    stored = dict(conn.execute("select chunk_id, vector from vectors order by chunk_id"))
    conn.close()
    args = [HYBRIDSQL, "search", "rolling back a deploy", "--db", db, "--per-file", "0"]
    args += ["--now", "2026-11-22", "-n", "10"]
    found = subprocess.run([*args, "--json"], capture_output=True, text=True, check=True)
    ids = [r["id"] for r in json.loads(found.stdout)["results"]]
    statement = subprocess.run([*args, "--explain"], capture_output=True, text=True, check=True)
    argv, env, library = shells[name]
    vectors, rows = run((argv, {**env, **beside}, library), REINDEX + statement.stdout, db=db)
    assert [r["chunk_id"] for r in vectors] == list(stored) and len(stored) > 50
    for r in vectors:
        mine = np.frombuffer(bytes.fromhex(r["v"]), dtype="<f4")
        assert np.abs(mine - np.frombuffer(stored[r["chunk_id"]], dtype="<f4")).max() <= 1e-5
    assert [r["id"] for r in rows] == ids and len(ids) == 10
