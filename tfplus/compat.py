"""tf.compat: TF1 scripts run under TensorFlow 2 spell the TF1 API tf.compat.v1 (tfplus is that API), and convert
paths and names with as_bytes / as_text (e.g. a SavedModel's versioned export path).

    export_path = os.path.join(tf.compat.as_bytes("export"), tf.compat.as_bytes(str(1)))
"""
from __future__ import annotations

import sys

from tfplus.unsupported import module_getattr

# tfplus itself, which imports this module (it is in sys.modules by then).
v1 = sys.modules["tfplus"]


def as_bytes(bytes_or_text, encoding: str = "utf-8") -> bytes:
    """`bytes_or_text` as bytes (text is encoded)."""
    if isinstance(bytes_or_text, (bytes, bytearray)):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text, encoding: str = "utf-8") -> str:
    """`bytes_or_text` as str (bytes are decoded)."""
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, (bytes, bytearray)):
        return bytes(bytes_or_text).decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text

__getattr__ = module_getattr(__name__, "tf.compat")
