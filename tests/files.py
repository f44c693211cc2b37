"""Files the tests make by hand: a real PNG without an imaging library."""

import struct
import zlib

PNG_W, PNG_H = 3, 2


def png_bytes(width=PNG_W, height=PNG_H):
    """A real PNG written by hand (no Pillow here): `width` x `height` RGB pixels."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes([200, 80, 0] * width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
