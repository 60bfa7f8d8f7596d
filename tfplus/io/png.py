"""tf.image.decode_png / encode_png on the host, with the standard library's zlib (no image library): PNG's
chunks, its five row filters, bit depths 1-16 (decoded to 8 bits), gray / gray+alpha / RGB / RGBA / palette
images. Interlaced (Adam7) files are refused with a clear error. tf.image.decode_jpeg is not implemented
(tfplus.unsupported says what to do).

    import tfplus as tf
    image = tf.image.decode_png(tf.read_file("cat.png"), channels=3)   # uint8 [h, w, 3]
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from tfplus import dtypes as _dt
from tfplus import errors
from tfplus.framework import convert_to_tensor
from tfplus.ops.host_ops import host_op, to_bytes

__all__ = ["decode_png", "encode_png", "decode_image"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # color type -> samples per pixel
_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> color type written


def _invalid(message: str):
    return errors.InvalidArgumentError(None, None, message)


def _chunks(data: bytes):
    if not data.startswith(_SIGNATURE):
        raise _invalid("DecodePng: the input is not a PNG file (no PNG signature); tfplus decodes PNG only "
                       "(tf.image.decode_jpeg is not implemented)")
    pos = len(_SIGNATURE)
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if len(body) != n or zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]:
            raise _invalid(f"DecodePng: chunk {kind!r} at byte {pos} is truncated or damaged (CRC mismatch)")
        yield kind, body
        pos += 12 + n


def _unfilter(raw: bytes, height: int, row_bytes: int, bpp: int) -> np.ndarray:
    """The image's bytes, rows unfiltered (filter types 0-4: none, sub, up, average, paeth)."""
    rows = np.frombuffer(raw, np.uint8)
    if rows.size < height * (row_bytes + 1):
        raise _invalid(f"DecodePng: the image data has {rows.size} bytes, {height} rows need "
                       f"{height * (row_bytes + 1)}")
    rows = rows[:height * (row_bytes + 1)].reshape(height, row_bytes + 1)
    out = np.zeros((height, row_bytes), np.uint8)
    prev = np.zeros(row_bytes, np.int32)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prev) & 0xFF
        elif kind in (1, 3, 4):
            cur = np.zeros(row_bytes, np.int32)
            for x in range(0, row_bytes, bpp):  # each pixel depends on its left neighbour's result
                left = cur[x - bpp:x] if x else np.zeros(bpp, np.int32)
                up = prev[x:x + bpp]
                if kind == 1:
                    pred = left
                elif kind == 3:
                    pred = (left + up) >> 1
                else:
                    upleft = prev[x - bpp:x] if x else np.zeros(bpp, np.int32)
                    p = left + up - upleft
                    pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - upleft)
                    pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
                cur[x:x + bpp] = (line[x:x + bpp] + pred) & 0xFF
        else:
            raise _invalid(f"DecodePng: row {y} has filter type {kind}; PNG's are 0 to 4 (a damaged file)")
        out[y] = cur
        prev = cur
    return out


def decode(data: bytes, channels: int = 0) -> np.ndarray:
    """A PNG file's pixels as uint8 [height, width, channels] (channels 0: the file's own; palettes become RGB,
    or RGBA where the file has transparency)."""
    header, palette, alpha, idat = None, None, None, []
    for kind, body in _chunks(data):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif kind == b"tRNS":
            alpha = np.frombuffer(body, np.uint8)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise _invalid("DecodePng: the file has no IHDR chunk (a damaged file)")
    width, height, depth, color, _, _, interlace = header
    if interlace:
        raise _invalid("DecodePng: interlaced (Adam7) PNG files are not supported; save the image without "
                       "interlacing")
    if color not in _CHANNELS:
        raise _invalid(f"DecodePng: color type {color} is not a PNG color type (a damaged file)")
    samples = _CHANNELS[color]
    row_bytes = (width * samples * depth + 7) // 8
    pixels = _unfilter(zlib.decompress(b"".join(idat)), height, row_bytes, max(1, samples * depth // 8))
    if depth == 16:
        values = pixels.view(">u2").astype(np.uint16).reshape(height, width, samples)
    elif depth == 8:
        values = pixels.reshape(height, width, samples)
    else:  # 1, 2, 4 bits: unpack, then scale gray up to 8 bits (palette indices stay indices)
        bits = np.unpackbits(pixels, axis=1).reshape(height, -1, depth)
        values = (bits * (1 << np.arange(depth - 1, -1, -1))).sum(-1)[:, :width * samples]
        values = values.reshape(height, width, samples).astype(np.uint8)
        if color == 0:
            values = (values * (255 // ((1 << depth) - 1))).astype(np.uint8)
    if color == 3:
        if palette is None:
            raise _invalid("DecodePng: a palette image without a PLTE chunk (a damaged file)")
        rgb = palette[values[..., 0]]
        if alpha is not None:
            full = np.full(len(palette), 255, np.uint8)
            full[:len(alpha)] = alpha[:len(palette)]
            rgb = np.concatenate([rgb, full[values[..., 0]][..., None]], axis=-1)
        values = rgb
    if values.dtype == np.uint16:  # 8 bits per sample: the high byte, as libpng's strip_16 that TensorFlow asks for
        values = (values >> 8).astype(np.uint8)
    return _convert_channels(values, channels)


def _convert_channels(values: np.ndarray, channels: int) -> np.ndarray:
    have = values.shape[-1]
    if channels in (0, have):
        return values
    top = 255
    color = values[..., :3] if have >= 3 else np.repeat(values[..., :1], 3, axis=-1)
    alpha = values[..., -1:] if have in (2, 4) else np.full(values.shape[:2] + (1,), top, values.dtype)
    if channels == 3:
        return color
    if channels == 4:
        return np.concatenate([color, alpha], axis=-1)
    if have >= 3:
        raise _invalid("DecodePng: converting a color image to gray (channels=1 or 2) is not supported; decode "
                       "with channels=3 and tf.image.rgb_to_grayscale")
    return values[..., :1] if channels == 1 else np.concatenate([values[..., :1], alpha], axis=-1)


def encode(image: np.ndarray, compression: int = -1) -> bytes:
    """The PNG file of an [height, width, channels] uint8 image (rows unfiltered)."""
    height, width, channels = image.shape
    rows = image.astype(np.uint8).reshape(height, -1)
    raw = np.concatenate([np.zeros((height, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPE[channels], 0, 0, 0)
    return _SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, compression)) + \
        chunk(b"IEND", b"")


def decode_png(contents, channels=0, dtype=_dt.uint8, name=None):
    """The pixels of the PNG file `contents` (a string scalar): [height, width, channels] uint8."""
    dtype = _dt.as_dtype(dtype)
    if dtype is not _dt.uint8:
        raise TypeError(f"decode_png: dtype {dtype.name}; tfplus decodes to tf.uint8 only")
    if channels not in (0, 1, 3, 4):
        raise ValueError(f"decode_png: channels must be 0, 1, 3 or 4, got {channels}")
    return host_op(name or "DecodePng", lambda c: [decode(to_bytes(c[()]), channels)],
                   [convert_to_tensor(contents, dtype=_dt.string)], [dtype],
                   [(None, None, channels or None)])[0]


def encode_png(image, compression=-1, name=None):
    """The PNG file (a string scalar) of an [height, width, channels] uint8 image, channels 1-4."""
    image = convert_to_tensor(image)
    if image.dtype is not _dt.uint8:
        raise TypeError(f"encode_png: the image is {image.dtype.name}; cast it to tf.uint8")
    if image.shape.ndims not in (None, 3) or image.shape.as_list()[-1] not in (None, 1, 2, 3, 4):
        raise ValueError(f"encode_png: the image must be [height, width, 1-4 channels], got shape {image.shape}")
    return host_op(name or "EncodePng", lambda a: [np.array(encode(a, compression), object)], [image],
                   [_dt.string], [()])[0]


def decode_image(contents, channels=None, dtype=_dt.uint8, name=None, expand_animations=True):
    """tf.image.decode_image for PNG files (uint8 [height, width, channels]); a JPEG, GIF or BMP file is an
    InvalidArgumentError saying that tfplus decodes PNG only."""
    return decode_png(contents, channels or 0, dtype, name or "DecodeImage")
