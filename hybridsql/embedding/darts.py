"""darts-clone's double-array trie, the structure sentencepiece stores a normalizer's charsmap in
(and tokenizers' Precompiled reads): built here for the SentencePiece Unigram tokenizer's section
(its pieces, and a charsmap), read in place by csrc/model/darts.h.

The array is of 32-bit units. A node's unit holds its label (the byte that leads to it, bits
0-7), whether a key ends there (bit 8) and the offset to its children (bits 10-30, shifted left
by 8 more where bit 9 is set). From the node at ``pos`` the child of byte ``c`` is at
``pos ^ offset ^ c``, and is that child only when its label is ``c``; where a key ends, the unit
at ``pos ^ offset`` (byte 0's place) holds its value with bit 31 set, so that it is no byte's
label. Keys are byte strings without a zero byte; values are 0 to 2**31 - 1.

darts-clone's own builder also merges equal suffixes; this one does not (the trie of 250,002
XLM-R pieces is 1.03 M units of which 782,760 are nodes). The array is whole blocks of 256 units:
``pos ^ offset ^ c`` stays inside the block of ``pos ^ offset``, so a reader that does not check
bounds (spm_precompiled) never reads past the end either.
"""

from __future__ import annotations

import struct
import sys
from array import array

_LEAF = 1 << 31
_NEAR = 1 << 21  # offsets below this are stored as they are; above, a multiple of 256 < 2**29
_FAR = 1 << 29
_WINDOW = 16 * 256


def _encodable(offset: int) -> bool:
    return offset < _NEAR or (offset < _FAR and not offset & 0xFF)


def _offset_bits(offset: int) -> int:
    if offset < _NEAR:
        return offset << 10
    return (offset >> 8) << 10 | 1 << 9


def build(entries: dict) -> bytes:
    """The double array of ``entries`` ({key bytes: value}), its units little-endian."""
    keys = sorted(entries)
    for key in keys:
        if not key or 0 in key:
            raise ValueError(f"darts.build(): the key {key!r} is empty or holds a zero byte")
        if not 0 <= entries[key] < _LEAF:
            raise ValueError(f"darts.build(): the value of {key!r} is not 0 to 2**31 - 1")
    units = [0] * 1024
    used = bytearray(1024)  # a unit is a node or a value
    base = bytearray(1024)  # pos ^ offset of some node: two nodes may not share one
    used[0] = 1  # the root's
    state = [0, 0, 0]  # the highest base, the end of its block, the first unit looked at

    def place(pos: int, labels: list) -> int:
        """A base q for the children (labels) of the node at pos: q ^ c free for each, q no
        other node's. Free units are looked for in the last _WINDOW units only, as darts-clone's
        builder keeps its last 16 blocks open: the few left free below cost less than the
        searches that would fill them."""
        first = labels[0]
        free = max(state[2], state[1] - _WINDOW)
        while free < len(used) and used[free]:
            free += 1
        state[2] = slot = free
        while True:
            q = slot ^ first
            if (q | 0xFF) >= len(used):
                grow = max(len(used), (q | 0xFF) + 1 - len(used), 1024)
                units.extend([0] * grow)
                used.extend(bytes(grow))
                base.extend(bytes(grow))
            if (
                not base[q]
                and _encodable(pos ^ q)
                and (len(labels) == 1 or not any(used[q ^ c] for c in labels))
            ):
                break
            slot = used.find(0, slot + 1)
            if slot < 0:
                slot = len(used)
        base[q] = 1
        if q > state[0]:
            state[0], state[1] = q, q | 0xFF
        for c in labels:
            used[q ^ c] = 1
        return q

    stack = [(0, len(keys), 0, 0)] if keys else []
    while stack:
        lo, hi, depth, pos = stack.pop()
        if hi - lo == 1:  # one key left below: a chain of nodes, then its value
            key = keys[lo]
            for c in key[depth:]:
                q = place(pos, [c])
                units[pos] |= _offset_bits(pos ^ q)
                units[q ^ c] = c
                pos = q ^ c
            q = place(pos, [0])
            units[pos] |= _offset_bits(pos ^ q) | 1 << 8
            units[q] = entries[key] | _LEAF
            continue
        labels, groups, value = [], [], None
        i = lo
        if len(keys[i]) == depth:
            value = entries[keys[i]]
            labels.append(0)
            i += 1
        while i < hi:
            byte, j = keys[i][depth], i + 1
            while j < hi and keys[j][depth] == byte:
                j += 1
            labels.append(byte)
            groups.append((byte, i, j))
            i = j
        q = place(pos, labels)
        units[pos] |= _offset_bits(pos ^ q) | (value is not None) << 8
        if value is not None:
            units[q] = value | _LEAF
        for byte, start, end in reversed(groups):
            units[q ^ byte] = byte
            stack.append((start, end, depth + 1, q ^ byte))
    last = state[0]
    out = array("I", units[: (last | 0xFF) + 1])
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def _unit(units: bytes, pos: int) -> int:
    return struct.unpack_from("<I", units, 4 * pos)[0] if 0 <= 4 * pos < len(units) else 0


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def prefixes(units: bytes, key: bytes) -> list:
    """[(length, value)] of every key of the array that ``key`` starts with, shortest first."""
    found = []
    pos = _offset(_unit(units, 0))
    for i, c in enumerate(key):
        if c == 0:
            break
        pos ^= c
        unit = _unit(units, pos)
        if unit & (_LEAF | 0xFF) != c:
            break
        pos ^= _offset(unit)
        if unit >> 8 & 1:
            found.append((i + 1, _unit(units, pos) & (_LEAF - 1)))
    return found


def charsmap(rules: dict) -> bytes:
    """A precompiled charsmap as sentencepiece writes one ({key bytes: replacement bytes}): the
    trie's byte count (uint32), the trie, then the replacements, each ending in a zero byte
    (a replacement is written once, however many keys it serves)."""
    strings: dict = {}
    blob = bytearray()
    values = {}
    for key in sorted(rules):
        value = rules[key]
        if value not in strings:
            strings[value] = len(blob)
            blob += value + b"\0"
        values[key] = strings[value]
    trie = build(values)
    return struct.pack("<I", len(trie)) + trie + bytes(blob)


def charsmap_rules(blob: bytes) -> dict:
    """{key bytes: replacement bytes} of a precompiled charsmap: every key of its trie."""
    (size,) = struct.unpack_from("<I", blob)
    units = array("I", blob[4 : 4 + size])
    if sys.byteorder == "big":
        units.byteswap()
    strings = blob[4 + size :]
    children: dict = {}  # pos ^ offset of a node -> [(byte, pos) of the units labelled so]
    for pos, unit in enumerate(units):
        c = unit & (_LEAF | 0xFF)
        if 0 < c < 256 and pos:
            children.setdefault(pos ^ c, []).append((c, pos))
    rules = {}
    todo = [(0, b"")]
    while todo:
        pos, key = todo.pop()
        unit = units[pos]
        q = pos ^ _offset(unit)
        if key and unit >> 8 & 1 and q < len(units):
            at = units[q] & (_LEAF - 1)
            rules[key] = strings[at : strings.index(b"\0", at)]
        todo.extend((child, key + bytes([c])) for c, child in children.get(q, ()))
    return rules
