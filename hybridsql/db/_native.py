"""The one module that touches cffi: the C kernels of csrc/hybridsql.h, wrapped for Python.

The kernels live in the loadable library itself (``hybridsql.so``, ``.dylib`` or ``.dll``), which
exports them beside SQLite's entry point; cffi opens it in ABI mode, so one binary per platform
serves every Python version. Callers pass and get plain Python objects; ``ffi`` and ``lib`` never
leave this module. cffi is imported, and the declarations parsed, at the first kernel call, not
at import: the extension's own path (hybridsql.connect, a search) never calls one, and parsing
them cost a new process more than the rest of its first connect.
"""

import os
import sys
import threading

# The declarations of csrc/hybridsql.h (tests/test_extension.py checks that they agree).
CDEF = """
const char *hs_simd_path(void);
int64_t hs_first_nonfinite(const float *v, int64_t d);
double hs_cosine(const float *a, const float *b, int64_t d);
struct HsVocab *hs_vocab_new(const char *blob, int64_t len, int32_t n);
void hs_vocab_free(struct HsVocab *v);
int32_t hs_vocab_id(const struct HsVocab *v, const char *piece);
int64_t hs_tokenize(const struct HsVocab *v, const char *text, int64_t len, int most,
                    int32_t *ids, int64_t cap);
double hs_readable_share(const struct HsVocab *v, const int32_t *ids, int64_t n);
struct HsTokenizer *hs_tokenizer_open(int kind, const void *section, int64_t len, char *err,
                                      size_t errcap);
void hs_tokenizer_free(struct HsTokenizer *t);
int32_t hs_tokenizer_special(const struct HsTokenizer *t, int which);
int32_t hs_tokenizer_size(const struct HsTokenizer *t);
int32_t hs_tokenizer_id(const struct HsTokenizer *t, const char *piece, int64_t len);
int64_t hs_tokenizer_ids(const struct HsTokenizer *t, const char *prefix, int64_t plen,
                         const char *text, int64_t len, int per, int most, int32_t *ids,
                         int64_t cap);
double hs_tokenizer_readable(const struct HsTokenizer *t, const int32_t *ids, int64_t n);
int hs_model_header(const void *head, uint64_t size, char *err, size_t errcap);
struct HsModel *hs_model_open(const void *data, size_t n, char *err, size_t errcap);
void hs_model_free(struct HsModel *m);
const char *hs_model_simd(void);
const char *hs_model_id(const struct HsModel *m);
int hs_model_dims(const struct HsModel *m);
int hs_model_window(const struct HsModel *m);
int hs_model_embed(const struct HsModel *m, const char *text, int64_t len, int role, float *out,
                   int (*stop)(void *), void *arg);
int64_t hs_model_tokens(const struct HsModel *m, const char *text, int64_t len, int role,
                        int most, int32_t *ids, int64_t cap);
int hs_model_embed_ids(const struct HsModel *m, const int32_t *ids, int64_t n, float *out);
"""

# The library's file name on each platform: SQLite derives the entry point
# sqlite3_hybridsql_init from it, and the sqlite3 shell's `.load hybridsql` adds the suffix.
LIBRARY = {"win32": "hybridsql.dll", "darwin": "hybridsql.dylib"}.get(sys.platform, "hybridsql.so")
# The package's folder (hybridsql/), where the build puts it and every wheel carries it.
PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), LIBRARY)

_opened: list = []  # [(ffi, lib)] once opened; lib None when the library is not built
_lock = threading.Lock()


def _open():
    """(ffi, lib): the library opened with cffi on first use; lib None where it is not built."""
    if not _opened:
        with _lock:
            if not _opened:
                from cffi import FFI

                ffi = FFI()
                ffi.cdef(CDEF)
                try:
                    lib = ffi.dlopen(PATH)
                except OSError:  # not built (a source checkout): callers use numpy or Python
                    lib = None
                _opened.append((ffi, lib))
    return _opened[0]


def built() -> bool:
    """Whether the library's file is there: found, not opened (no cffi), for a caller that
    only needs to know whether the engine can run here."""
    return os.path.isfile(PATH)


def available() -> bool:
    """Whether the library is built and opens: the kernels below can be called."""
    return _open()[1] is not None


def simd_path() -> str | None:
    """The SIMD path the kernels chose on this CPU: ``avx2+fma``, ``sse2``, ``neon`` or
    ``generic``; None where the library is not built. Asked through ctypes, not cffi: it is all
    that ``hybridsql --version`` asks of the library, and cffi's parsing of the declarations
    above would be most of that command's time."""
    import ctypes

    try:
        library = ctypes.CDLL(PATH)
    except OSError:  # not built (a source checkout)
        return None
    library.hs_simd_path.restype = ctypes.c_char_p
    return library.hs_simd_path().decode()


def version_line() -> str:
    """What ``hybridsql --version`` prints: the version and the kernels' SIMD path."""
    from hybridsql import __version__

    return f"hybridsql {__version__} (simd {simd_path() or 'none: not built'})"


def first_nonfinite(blob: bytes) -> int:
    """Index of the first NaN or infinity in a float32 blob, -1 when all are finite."""
    ffi, lib = _open()
    return lib.hs_first_nonfinite(ffi.from_buffer("float[]", blob), len(blob) // 4)


def cosine(a: bytes, b: bytes) -> float:
    """Cosine of two float32 blobs of equal length, in double precision."""
    ffi, lib = _open()
    return lib.hs_cosine(ffi.from_buffer("float[]", a), ffi.from_buffer("float[]", b), len(a) // 4)


def model_simd() -> str:
    """The SIMD path of the embedding engine's matmul: ``avx512``, ``avx2+fma``, ``neon`` or
    ``generic`` (hs_simd_path()'s, with AVX-512 where the CPU has it)."""
    ffi, lib = _open()
    return ffi.string(lib.hs_model_simd()).decode()


class Vocab:
    """The C tokenizer (csrc/model/tokenizer.h) over a WordPiece vocabulary: ``pieces`` in id
    order."""

    def __init__(self, pieces: list):
        ffi, lib = _open()
        blob = b"".join(p.encode() + b"\0" for p in pieces)
        vocab = lib.hs_vocab_new(blob, len(blob), len(pieces))
        if vocab == ffi.NULL:
            raise ValueError("hs_vocab_new(): not a vocabulary with [UNK], or no memory")
        self._vocab = ffi.gc(vocab, lib.hs_vocab_free)

    def id(self, piece: str) -> int:
        """The id of ``piece``, -1 when the vocabulary lacks it."""
        _, lib = _open()
        return lib.hs_vocab_id(self._vocab, piece.encode())

    def tokenize(self, text: bytes, most: int, cap: int) -> list:
        """The ids of UTF-8 ``text`` in ``most`` windows (at most ``cap``), no [CLS]/[SEP]."""
        ffi, lib = _open()
        ids = ffi.new("int32_t[]", max(cap, 1))
        n = lib.hs_tokenize(self._vocab, text, len(text), most, ids, cap)
        if n < 0:
            raise MemoryError("hs_tokenize(): no memory")
        return list(ids[0:n])

    def readable_share(self, ids: list) -> float:
        """windows.py's readable_share over ``ids``."""
        ffi, lib = _open()
        return lib.hs_readable_share(self._vocab, ffi.new("int32_t[]", ids), len(ids))


class Tokenizer:
    """A model file's tokenizer section of ``kind`` ("wordpiece" or "unigram"; their layouts are
    csrc/model/tokenizer.h's and unigram.c's), opened by the C tokenizer: ``Tokenizer(kind,
    section)`` raises EmbeddingError with the C side's one line when it refuses the bytes."""

    KINDS = {"wordpiece": 1, "unigram": 2}
    SPECIAL = {"cls": 0, "sep": 1, "pad": 2, "unk": 3, "mask": 4}

    def __init__(self, kind: str, section: bytes):
        from hybridsql.errors import EmbeddingError

        ffi, lib = _open()
        self._section = ffi.new("char[]", section)  # the tokenizer reads it in place
        err = ffi.new("char[]", 512)
        tok = lib.hs_tokenizer_open(self.KINDS[kind], self._section, len(section), err, len(err))
        if tok == ffi.NULL:
            raise EmbeddingError(ffi.string(err).decode())
        self._tok = ffi.gc(tok, lib.hs_tokenizer_free)
        self.size = lib.hs_tokenizer_size(tok)

    def special(self, name: str) -> int:
        """The id of "cls", "sep", "pad", "unk" or "mask", -1 where it has none."""
        _, lib = _open()
        return lib.hs_tokenizer_special(self._tok, self.SPECIAL[name])

    def id(self, piece: str) -> int:
        """The id of ``piece``, -1 when it is not one."""
        _, lib = _open()
        raw = piece.encode()
        return lib.hs_tokenizer_id(self._tok, raw, len(raw))

    def ids(self, text: bytes, per: int, most: int, cap: int, prefix: bytes = b"") -> list:
        """The ids of UTF-8 ``prefix + text`` in ``most`` windows of ``per`` (at most ``cap``),
        without the windows' own special tokens."""
        ffi, lib = _open()
        out = ffi.new("int32_t[]", max(cap, 1))
        n = lib.hs_tokenizer_ids(
            self._tok, prefix, len(prefix), text, len(text), per, most, out, cap
        )
        if n < 0:
            raise MemoryError("hs_tokenizer_ids(): no memory")
        return list(out[0:n])

    def readable_share(self, ids: list) -> float:
        """The share of ``ids`` the model can read (hs_tokenizer_readable)."""
        ffi, lib = _open()
        return lib.hs_tokenizer_readable(self._tok, ffi.new("int32_t[]", ids), len(ids))


MODEL_HEADER = 128  # HS_MODEL_HEADER of csrc/model/model.h: a model file's header, its first bytes


def model_header(head: bytes, size: int) -> str | None:
    """hs_model_header: None where a model file of ``size`` bytes, whose first bytes are
    ``head`` (min(size, MODEL_HEADER) of them), has a header that agrees with its size; else the
    engine's line, as Model would refuse the whole file with."""
    if len(head) < min(size, MODEL_HEADER):
        raise ValueError(f"model_header(): {len(head)} bytes of the header, not {MODEL_HEADER}")
    ffi, lib = _open()
    err = ffi.new("char[]", 512)
    return ffi.string(err).decode() if lib.hs_model_header(head, size, err, len(err)) else None


ROLES = {"query": 0, "document": 1}  # HS_MODEL_QUERY, HS_MODEL_DOCUMENT of csrc/model/model.h


def _role(role: str) -> int:
    if role not in ROLES:
        raise ValueError(f"role must be 'query' or 'document', got {role!r}")
    return ROLES[role]


class Model:
    """A model file's bytes (embedding/model_file.py) opened by the C engine (csrc/model/model.c):
    ``Model(data)`` raises EmbeddingError with the engine's one line when it refuses them.
    ``data`` is bytes (copied) or an anonymous mmap of the process's own (used in place, kept:
    nothing may change it while the model lives)."""

    def __init__(self, data):
        import mmap

        from hybridsql.errors import EmbeddingError

        ffi, lib = _open()
        if isinstance(data, mmap.mmap):  # a page's alignment, which the engine needs
            self._data = ffi.from_buffer("char[]", data)
        else:
            self._data = ffi.new("char[]", len(data))  # malloc's alignment
            ffi.memmove(self._data, data, len(data))
        err = ffi.new("char[]", 512)
        model = lib.hs_model_open(self._data, len(data), err, len(err))
        if model == ffi.NULL:
            raise EmbeddingError(ffi.string(err).decode())
        self._model = ffi.gc(model, lib.hs_model_free)
        self.model_id = ffi.string(lib.hs_model_id(model)).decode()
        self.dims = lib.hs_model_dims(model)
        self.window = lib.hs_model_window(model)

    def embed(self, text: str, stop=None, role: str = "query") -> bytes | None:
        """``text``'s vector as a ``role`` ("query", as SQL embed(text), or "document"), a
        float32 blob of ``dims``; None when ``stop()``, asked between two windows, said True."""
        ffi, lib = _open()
        raw = text.encode("utf-8", "surrogatepass")
        out = ffi.new("float[]", self.dims)
        asked = ffi.callback("int(void *)", lambda _: bool(stop())) if stop else ffi.NULL
        rc = lib.hs_model_embed(self._model, raw, len(raw), _role(role), out, asked, ffi.NULL)
        if rc == 2:
            raise MemoryError
        return bytes(ffi.buffer(out)) if rc == 0 else None

    def tokens(self, text: str, role: str = "query", most: int = 8) -> list:
        """The ids the model reads of ``text`` as a ``role`` in ``most`` windows: its prefix's
        and the text's, no [CLS]/[SEP]."""
        ffi, lib = _open()
        raw = text.encode("utf-8", "surrogatepass")
        cap = most * (self.window - 2)
        ids = ffi.new("int32_t[]", max(cap, 1))
        n = lib.hs_model_tokens(self._model, raw, len(raw), _role(role), most, ids, cap)
        if n < 0:
            raise MemoryError("hs_model_tokens(): no memory")
        return list(ids[0:n])

    def embed_ids(self, ids: list) -> bytes:
        """The vector of word-piece ids ([CLS] and [SEP] left out), a float32 blob."""
        ffi, lib = _open()
        out = ffi.new("float[]", self.dims)
        rc = lib.hs_model_embed_ids(self._model, ffi.new("int32_t[]", ids), len(ids), out)
        if rc != 0:
            raise ValueError("an id is not in the vocabulary" if rc < 0 else "out of memory")
        return bytes(ffi.buffer(out))
