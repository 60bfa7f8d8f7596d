"""Byte sizes in SI and IEC units: `parse_size("64MB") == 64_000_000`, `parse_size("64MiB") == 67_108_864`.

    >>> from tfplus.units import parse_size, format_size
    >>> parse_size("1.5GB"), parse_size("512"), format_size(67_108_864)
    (1500000000, 512, '67.1 MB')
"""
from __future__ import annotations

import re
from decimal import Decimal, DecimalException

# Units are matched case-insensitively: 'kb' and 'KB' both mean 1000 bytes. A bare prefix ('64M') is refused
# because it is ambiguous between SI and IEC.
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
MAX_SIZE = 2**63 - 1  # bytes; what a signed 64-bit count holds
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes in `text` ('64MB', '64MiB', '1.5GB', '4096'); `what` names the flag or argument in errors."""
    if isinstance(text, bool):
        raise TypeError(f"{what}: expected a size such as '64MB', got {text!r}")
    if isinstance(text, int):
        if not 0 <= text <= MAX_SIZE:
            raise ValueError(f"{what}: a size is 0..{MAX_SIZE} bytes, got {text}")
        return text
    if not isinstance(text, str):
        raise TypeError(f"{what}: expected a size such as '64MB' or a number of bytes, got {text!r}")
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else None
    if unit in ("k", "m", "g", "t"):
        raise ValueError(f"{what}: {text!r} is ambiguous; write {m.group(1)}{unit.upper()}B "
                         f"(powers of 1000) or {m.group(1)}{unit.upper()}iB (powers of 1024)")
    if m is None or unit not in _UNITS:
        raise ValueError(f"{what}: cannot read {text!r} as a size; write a number of bytes or a number with "
                         "a unit: kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), "
                         "e.g. 64MB or 64MiB")
    try:
        value = Decimal(m.group(1)) * _UNITS[unit]  # Decimal: '1.1MB' is exactly 1,100,000 bytes
    except DecimalException:  # an exponent beyond Decimal's own range
        value = Decimal("Infinity")
    if value > MAX_SIZE:  # checked before int(): '1e999999' would build a million-digit integer
        raise ValueError(f"{what}: {text!r} is too large; sizes go up to {MAX_SIZE} bytes (9.2 EB)")
    if value != int(value):
        raise ValueError(f"{what}: {text!r} is not a whole number of bytes ({value} bytes)")
    return int(value)


def format_size(n: int, iec: bool = False, up: bool = False) -> str:
    """'67.1 MB' (SI) or, with iec=True, '64.0 MiB'; plain bytes below one kilobyte. With up=True the figure is
    rounded up, never down, so that a size advised as "at least" it is one that suffices when typed back."""
    base, units = (1024, ("KiB", "MiB", "GiB", "TiB")) if iec else (1000, ("kB", "MB", "GB", "TB"))
    if abs(n) < base:
        return f"{n} B"
    scale = 1
    for unit in units:
        scale *= base
        if abs(n) < scale * base or unit == units[-1]:
            tenths = -(-n * 10 // scale) if up else round(n * 10 / scale)  # integers: exact for any n
            return f"{tenths // 10}.{tenths % 10} {unit}" if tenths >= 0 else f"{n / scale:.1f} {unit}"
    raise AssertionError("unreachable")


def size_class(nbytes: int) -> int:
    """The opencl buffer pool's size class of a request: a multiple of 256 bytes at most 1/8 above it, so like
    sizes share buffers. The memory planner counts tensors held outside its arena (variables, slots, the fed
    batch) in these units on opencl, as the device holds them."""
    step = 1 << max(8, nbytes.bit_length() - 4)
    return max(step, -(-nbytes // step) * step)
