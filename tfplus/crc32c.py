"""CRC32C (Castagnoli), the checksum of TensorFlow's checkpoint tables, data files and record files, in NumPy.

    >>> hex(value(b"123456789"))
    '0xe3069283'
    >>> hex(mask(value(b"")))
    '0xa282ead8'

A CRC is a byte-serial recurrence, so a Python loop runs at ~10 MB/s. Here long inputs are cut into many
equal lanes that advance 4 bytes per step together (two table lookups over all lanes), and the lanes' CRCs
are then folded pairwise, the left one moved past the right one's length by a linear "append n zero bytes"
operator. benchmarks/bench_checkpoint.py measures the throughput.
"""
from __future__ import annotations

import functools

import numpy as np

_POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reversed
_MASK_DELTA = 0xA282EAD8
_LANES = 1 << 14  # lanes advanced together; a power of two, for the pairwise fold
_CHUNK = 1 << 24  # bytes checksummed per pass: bounds the scratch memory at about this
_MIN_PIECE = 1 << 12  # shorter inputs (and tails) run the byte loop


def _byte_table() -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(_POLY), t >> 1).astype(np.uint32)
    return t


_TABLE = _byte_table()
_TABLE_LIST = [int(x) for x in _TABLE]


def _extend_loop(reg: int, data) -> int:
    """The raw register after `data` (no pre/post inversion), one byte at a time: for short inputs."""
    t = _TABLE_LIST
    for b in data:
        reg = t[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg


# -- the "append n zero bytes" operator: linear on the 32-bit register, kept as the images of its 32 bits ----
def _apply(cols: list[int], x: int) -> int:
    out = 0
    for i in range(32):
        if x >> i & 1:
            out ^= cols[i]
    return out


def _compose(a: list[int], b: list[int]) -> list[int]:
    """The operator a after b."""
    return [_apply(a, c) for c in b]


_ONE_ZERO = [_extend_loop(1 << i, b"\0") for i in range(32)]
_ZEROS_CACHE: dict[int, list[int]] = {}


def _zeros(n: int) -> list[int]:
    """The operator appending n zero bytes (by squaring the one-byte operator)."""
    if n not in _ZEROS_CACHE:
        result, power, k = [1 << i for i in range(32)], _ONE_ZERO, n
        while k:
            if k & 1:
                result = _compose(power, result)
            power = _compose(power, power)
            k >>= 1
        _ZEROS_CACHE[n] = result
    return _ZEROS_CACHE[n]


def _byte_tables(cols: list[int]) -> np.ndarray:
    """The operator as 4 tables of 256, one per register byte, to apply it to many registers at once."""
    tabs = np.zeros((4, 256), np.uint32)
    for b in range(4):
        for i in range(8):
            bit = np.uint32(cols[8 * b + i])
            tabs[b] ^= np.where(np.arange(256) >> i & 1, bit, np.uint32(0)).astype(np.uint32)
    return tabs


_TABLES_CACHE: dict[int, np.ndarray] = {}


@functools.cache
def _word_tables() -> tuple[np.ndarray, np.ndarray]:
    """Four steps of the byte recurrence with zero data, as a function of the register's low and high
    halves: 4 bytes cost two lookups in 256 KiB tables. Made on first use, not at import (~10 ms: every process
    imports this module, few checksum more than small records)."""
    halves = []
    for shift in (0, 16):
        x = np.arange(1 << 16, dtype=np.uint32) << np.uint32(shift)
        for _ in range(4):
            x = _TABLE[x & 0xFF] ^ (x >> 8)
        halves.append(x)
    return halves[0], halves[1]


def _lanes_crc(words: np.ndarray) -> int:
    """The raw register (from 0) of the lanes' bytes read one lane after another. `words` is (steps, K)
    little-endian uint32: row j holds the j-th 4 bytes of every lane."""
    steps, k = words.shape
    reg, x, idx, lo = (np.zeros(k, np.uint32) for _ in range(4))
    lo_table, hi_table = _word_tables()
    for row in words:
        np.bitwise_xor(reg, row, out=x)
        np.bitwise_and(x, 0xFFFF, out=idx)
        np.take(lo_table, idx, out=lo)
        np.right_shift(x, 16, out=idx)
        np.take(hi_table, idx, out=reg)
        reg ^= lo
    length = 4 * steps
    while reg.size > 1:  # fold neighbours: crc(A + B) = zeros(len B)(crc A) ^ crc B
        if length not in _TABLES_CACHE:
            _TABLES_CACHE[length] = _byte_tables(_zeros(length))
        tabs, left = _TABLES_CACHE[length], reg[0::2]
        reg = (tabs[0][left & 0xFF] ^ tabs[1][(left >> 8) & 0xFF] ^ tabs[2][(left >> 16) & 0xFF]
               ^ tabs[3][left >> 24] ^ reg[1::2])
        length *= 2
    return int(reg[0])


def extend(crc: int, data) -> int:
    """The CRC32C of the bytes that gave `crc` followed by `data` (bytes, bytearray, memoryview or a uint8
    array)."""
    buf = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    reg, start = crc ^ 0xFFFFFFFF, 0
    # Pieces of a power of two bytes, 4 KB to _CHUNK, in lanes of 16 steps or more (below that the byte loop is
    # as fast): inputs under 1 MB, such as a checkpoint index's blocks, take the lanes too (256 KB: 0.5 ms, not
    # 68), and the fold's operators, cached by length, stay a few dozen whatever the sizes seen.
    while buf.size - start >= _MIN_PIECE:
        n = min(_CHUNK, 1 << (buf.size - start).bit_length() - 1)
        lanes = min(_LANES, n // 64)
        words = buf[start:start + n].view("<u4").reshape(lanes, n // (4 * lanes)).T.copy()
        reg = _apply(_zeros(n), reg) ^ _lanes_crc(words)
        start += n
    reg = _extend_loop(reg, buf[start:].tobytes())
    return reg ^ 0xFFFFFFFF


def value(data) -> int:
    """The CRC32C of `data`."""
    return extend(0, data)


_GROUP = 1024  # buffers checksummed together by values(): lanes of one pass


def values(buffers: list) -> list[int]:
    """The CRC32C of each of `buffers` (bytes), as [value(b) for b in buffers], many at once: for many short
    inputs (a TFRecord file's records), which value() would each take through the byte loop. Buffers of similar
    size share a pass, one lane each, 4 bytes a step; each lane's register is taken when its whole words end,
    and its last 0-3 bytes run the byte loop."""
    out = [0] * len(buffers)
    lo_table, hi_table = _word_tables()
    order = sorted(range(len(buffers)), key=lambda i: len(buffers[i]))
    for g in range(0, len(order), _GROUP):
        group = order[g:g + _GROUP]
        if len(group) < 16:  # too few lanes to pay for the steps
            for i in group:
                out[i] = value(buffers[i])
            continue
        words = max(len(buffers[i]) for i in group) // 4
        rows = np.zeros((len(group), 4 * words + 4), np.uint8)
        ends: dict[int, list[int]] = {}
        for lane, i in enumerate(group):
            rows[lane, :len(buffers[i])] = np.frombuffer(buffers[i], np.uint8)
            ends.setdefault(len(buffers[i]) // 4, []).append(lane)
        columns = rows[:, :4 * words].view("<u4").T.copy()  # row j: the j-th word of every lane
        reg, x, taken = np.full(len(group), 0xFFFFFFFF, np.uint32), np.empty(len(group), np.uint32), {}
        for j in range(words + 1):
            if j in ends:
                taken.update(zip(ends[j], reg[ends[j]].tolist()))
            if j < words:
                np.bitwise_xor(reg, columns[j], out=x)
                reg = lo_table[x & 0xFFFF] ^ hi_table[x >> 16]
        for lane, i in enumerate(group):
            tail = buffers[i][len(buffers[i]) // 4 * 4:]
            out[i] = _extend_loop(taken[lane], tail) ^ 0xFFFFFFFF
    return out


def mask(crc: int) -> int:
    """TensorFlow's (LevelDB's) masked CRC, stored so that a CRC of data that holds CRCs stays informative."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
