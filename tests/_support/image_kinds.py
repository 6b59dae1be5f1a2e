"""Image files of every kind galleria's reader knows, and decompression bombs, written for tests.

Every picture is distinct (its own seed), so that a search finds exactly one copy of each.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def picture(seed: int, width: int = 48, height: int = 32) -> np.ndarray:
    """A smooth, asymmetric RGB picture of its own (JPEG-friendly: no sharp edges)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    a, b, c = rng.uniform(3, 12, 3)
    red = 128 + 100 * np.sin(x / a + seed)
    green = 128 + 100 * np.cos(y / b + 2 * seed)
    blue = 128 + 90 * np.sin((x + y) / c)
    return np.rint(np.clip(np.stack([red, green, blue], axis=-1), 0, 255)).astype(np.uint8)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def write_image_kinds(folder: Path) -> dict[str, Path]:
    """Write one file of each kind into ``folder``; returns file name → path."""
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}

    def target(name: str) -> Path:
        files[name] = folder / name
        return folder / name

    # RGBA with hidden colours under its transparent half (a plain convert("RGB") shows them).
    rgb = picture(1)
    rng = np.random.default_rng(1)
    rgb[:, :24] = rng.integers(0, 256, (32, 24, 3), dtype=np.uint8)
    alpha = np.zeros((32, 48), np.uint8)
    alpha[:, 24:] = 255
    alpha[:, 20:24] = 128
    Image.fromarray(np.dstack([rgb, alpha]), mode="RGBA").save(target("rgba.png"))
    # Palette with a transparent index (tRNS in PNG, a transparent colour in GIF), not white.
    for seed, name in ((2, "palette_transparent.png"), (22, "palette_transparent.gif")):
        quantized = Image.fromarray(picture(seed)).quantize(32)
        indices = np.asarray(quantized).copy()
        indices[:10, :] = 0
        palette = Image.fromarray(indices, mode="P")
        palette.putpalette(quantized.getpalette() or [])
        palette.save(target(name), transparency=0)
    # Grey with alpha.
    grey = np.asarray(Image.fromarray(picture(3)).convert("L"))
    Image.fromarray(np.dstack([grey, np.tile(np.linspace(0, 255, 48).astype(np.uint8), (32, 1))]), "LA").save(
        target("la.png")
    )
    # EXIF-rotated JPEG (orientation 6), small and large (the large one is draft-decoded).
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(picture(4)).transpose(Image.Transpose.ROTATE_90).save(
        target("exif_rotated.jpg"), quality=92, exif=exif
    )
    Image.fromarray(picture(5, 640, 480)).transpose(Image.Transpose.ROTATE_270).save(
        target("large_exif_rotated.jpg"), quality=90, exif=exif
    )
    Image.fromarray(picture(6, 800, 600)).save(target("large.jpg"), quality=90)
    # 16-bit grey PNG, 16-bit RGB PNG, 32-bit float TIFF.
    grey16 = np.asarray(Image.fromarray(picture(7)).convert("L")).astype(np.uint16) * 257 + 100
    Image.fromarray(grey16).save(target("grey16.png"))
    values = picture(8).astype(">u2") * 257
    raw = b"".join(b"\x00" + row.tobytes() for row in values.reshape(32, 48 * 3))
    target("rgb48.png").write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", 48, 32, 16, 2, 0, 0, 0))
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )
    floats = np.asarray(Image.fromarray(picture(9)).convert("L")).astype(np.float32) / 7.0 - 3.0
    Image.fromarray(floats, mode="F").save(target("float.tif"))
    # CMYK JPEG, YCbCr TIFF, 1-bit PNG.
    Image.fromarray(picture(10)).convert("CMYK").save(target("cmyk.jpg"), quality=92)
    Image.fromarray(picture(11)).convert("YCbCr").save(target("ycbcr.tif"))
    Image.fromarray(picture(12)).convert("1").save(target("bilevel.png"))
    # Animated GIF, WebP and PNG: the first frame counts.
    frames = [Image.fromarray(picture(seed)) for seed in (13, 14, 15)]
    frames[0].save(target("animated.gif"), save_all=True, append_images=frames[1:], duration=40)
    frames = [Image.fromarray(picture(seed)) for seed in (16, 17)]
    frames[0].save(target("animated.webp"), save_all=True, append_images=frames[1:], lossless=True)
    frames = [Image.fromarray(picture(seed)) for seed in (18, 19)]
    frames[0].save(target("animated.png"), save_all=True, append_images=frames[1:])
    # A colour-keyed RGB PNG and a plain one.
    keyed = picture(20)
    keyed[:4] = (1, 2, 3)
    Image.fromarray(keyed).save(target("colour_key.png"), transparency=(1, 2, 3))
    Image.fromarray(picture(21)).save(target("plain.png"))
    return files


def png_bomb(path: Path, width: int, height: int) -> Path:
    """A valid, small 1-bit grey PNG of ``width`` × ``height`` pixels, all black (written row by row)."""
    row = b"\x00" + bytes((width + 7) // 8)
    packer = zlib.compressobj(9)
    parts = []
    for _ in range(height):
        parts.append(packer.compress(row))
    parts.append(packer.flush())
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
        + _chunk(b"IDAT", b"".join(parts))
        + _chunk(b"IEND", b"")
    )
    return path
