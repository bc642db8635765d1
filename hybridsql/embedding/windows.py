"""The windows the local model reads a text in, and what it can read of them.

A text longer than the model's window is read as consecutive windows of tokens, at most a few; a
text whose word pieces the model cannot read gets the zero vector (LocalProvider, and the C engine,
csrc/model/model.c, which reads the same windows: tests/test_tokenizer.py compares them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A long text is tokenized a growing prefix at a time, each cut at a place where it can be cut:
# before an ASCII space, tab or line break, or a CJK ideograph (which BERT's normalizer surrounds
# with spaces), else where the bound falls. The tokens before such a place do not depend on what
# follows it, so once a prefix fills more windows than are kept, its windows are the whole
# text's: a megabyte query is not tokenized whole only for all but its first windows to be
# dropped. A text is read to _PREFIX_CHARS characters a window at most: one whose words are so
# long (over 100 letters: one [UNK] each) that this fills no more windows is read that far alone,
# so no text costs more than that to embed, whatever its length.
_PREFIX_CHARS = 4096
_FIRST_CHARS = 512  # a window's first prefix: two characters a token
_CUT = re.compile("[ \t\n\r\u4e00-\u9fff]")


def _cut(text: str, at: int) -> str:
    """``text`` up to its first break at or just after ``at`` (else at ``at``), or all of it."""
    if len(text) <= at:
        return text
    found = _CUT.search(text, at, at + 256)
    return text[: found.start() if found else at]


def encode_windows(tokenizer, texts: list, most: int) -> list:
    """Each text's windows: the tokenizer's encoding and its overflowing windows (truncation on),
    at most ``most`` of them, tokenizing no more of the text than they need, and never more than
    _PREFIX_CHARS characters a window."""
    bound = _PREFIX_CHARS * most
    size = min(bound, _FIRST_CHARS * most)
    windows: list = [None] * len(texts)
    pending = list(range(len(texts)))
    while pending:
        prefixes = [_cut(texts[i], size) for i in pending]
        still = []
        for i, prefix, e in zip(pending, prefixes, tokenizer.encode_batch(prefixes), strict=True):
            found = [e, *e.overflowing]
            if len(found) > most or prefix is texts[i] or size >= bound:
                windows[i] = found[:most]
            else:
                still.append(i)
        pending, size = still, min(bound, 2 * size)
    return windows


# What the local model can read. Its vocabulary is English WordPiece: CJK comes out as [UNK] or
# one piece per character, hex and base64 as runs of one- and two-letter word pieces ("##a",
# "##3f"). A cosine computed from such pieces means nothing (an RSA modulus scored 0.71 against
# a CJK query), so a text with less than READABLE of its pieces readable gets the zero vector,
# whose cosine with every vector is 0: it is found by its words alone.
READABLE = 0.5


def readable_share(tokens: Sequence[str]) -> float:
    """The share of word pieces (special tokens left out) the model can read: not [UNK], not a
    single CJK character, not a continuation piece of one or two characters."""
    pieces = [t for t in tokens if t not in ("[CLS]", "[SEP]", "[PAD]")]
    if not pieces:
        return 1.0
    unreadable = sum(
        t == "[UNK]"
        or (len(t) == 1 and _CJK_CHAR.match(t) is not None)
        or (t.startswith("##") and len(t) <= 4)
        for t in pieces
    )
    return 1.0 - unreadable / len(pieces)


_CJK_CHAR = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
