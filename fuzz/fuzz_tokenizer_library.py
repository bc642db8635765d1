"""atheris harness: the C tokenizer (csrc/model/tokenizer.c) against the tokenizers library.

fuzz_tokenizer.c looks for memory errors; this one for a different answer. Each input is read
as byte 0: the windows (1 to 8), then the text as bytes, which Python reads with
errors="replace" (as tests/test_tokenizer.py does). The C ids must be encode_windows' ids
(hybridsql/embedding/windows.py, with LocalProvider's tokenizer), [CLS] and [SEP] left out,
window by window, and hs_readable_share must be readable_share of the same tokens.

Run it: see fuzz/README.md.
"""

import json
import sys

import atheris

with atheris.instrument_imports(include=["hybridsql"]):
    from hybridsql.db import _native
    from hybridsql.embedding.local_model import _TOKENIZER, _tokenizer
    from hybridsql.embedding.windows import encode_windows, readable_share

WINDOW = 254  # ids of the text in a window: LocalProvider.window less [CLS] and [SEP]

with open(_TOKENIZER, encoding="utf-8") as f:
    _VOCAB = json.load(f)["model"]["vocab"]
VOCAB = _native.Vocab(sorted(_VOCAB, key=_VOCAB.get))
LIBRARY = _tokenizer()


def test_one_input(data: bytes) -> None:
    if not data:
        return
    most, raw = data[0] % 8 + 1, data[1:]
    text = raw.decode("utf-8", "replace")
    windows = encode_windows(LIBRARY, [text], most)[0]
    expected = [w.ids[1:-1] for w in windows]
    got = VOCAB.tokenize(raw, most, WINDOW * most)
    mine = [got[i : i + WINDOW] for i in range(0, len(got), WINDOW)] or [[]]
    if mine != expected:
        raise AssertionError(f"{most} windows of {raw!r}: C {mine}, library {expected}")
    tokens = [t for w in windows for t in w.tokens[1:-1]]
    if VOCAB.readable_share(got) != readable_share(tokens):
        raise AssertionError(f"readable share of {raw!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
