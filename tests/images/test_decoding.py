"""Tests of image decoding: bit depth, EXIF orientation, transparency, colour modes, animation, JPEG draft,
decompression bombs, and how skipped images are reported (library warning and command line)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from galleria import InMemoryImageEmbeddingStore, PixelEmbedder, SkippedImageWarning
from galleria.images.decoding import draft_for, rgb_array, to_rgb_image
from galleria.images.queries import as_image_list
from galleria.images.reading import reader_for
from galleria.store import ImageReadError, read_rgb

# Exif orientation → the transpose that undoes it (applied to the upright picture, it gives what is stored).
STORED_FROM_UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def picture(width: int = 48, height: int = 32) -> np.ndarray:
    """A smooth, asymmetric RGB picture (JPEG-friendly: no sharp edges)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    red = 40 + 180 * x / max(width - 1, 1)
    green = 30 + 150 * y / max(height - 1, 1)
    blue = 128 + 90 * np.sin(x / 7.0) * np.cos(y / 5.0)
    return np.rint(np.stack([red, green, blue], axis=-1)).astype(np.uint8)


def gray_picture(width: int = 48, height: int = 32) -> np.ndarray:
    return np.asarray(Image.fromarray(picture(width, height)).convert("L"))


def cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def embed_file(path: Path, embedder: Any = None) -> np.ndarray:
    embedder = embedder or PixelEmbedder(size=16)
    return embedder.embed([read_rgb(path)])[0]


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def write_png16_rgb(path: Path, values: np.ndarray) -> None:
    """Write an (H, W, 3) uint16 array as a 48-bit RGB PNG (Pillow cannot write those)."""
    height, width, _ = values.shape
    rows = values.astype(">u2").reshape(height, width * 3)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + png_chunk(b"IDAT", zlib.compress(raw))
        + png_chunk(b"IEND", b"")
    )


# --------------------------------------------------------------------------- bit depth


def test_sixteen_bit_gray_png_reads_like_its_eight_bit_save(tmp_path: Path) -> None:
    gray = gray_picture()
    Image.fromarray(gray).save(tmp_path / "eight.png")
    Image.fromarray(gray.astype(np.uint16) * 257).save(tmp_path / "sixteen.png")
    with Image.open(tmp_path / "sixteen.png") as opened:
        assert opened.mode == "I;16"  # what Pillow gives for a 16-bit grayscale PNG
    eight, sixteen = read_rgb(tmp_path / "eight.png"), read_rgb(tmp_path / "sixteen.png")
    np.testing.assert_array_equal(sixteen, eight)  # not mostly white any more
    assert abs(float(sixteen.mean()) - float(gray.mean())) < 0.5
    distance = cosine_distance(embed_file(tmp_path / "eight.png"), embed_file(tmp_path / "sixteen.png"))
    assert distance < 1e-3


def test_sixteen_bit_rgb_png_reads_like_its_eight_bit_save(tmp_path: Path) -> None:
    rgb = picture()
    Image.fromarray(rgb).save(tmp_path / "eight.png")
    write_png16_rgb(tmp_path / "sixteen.png", rgb.astype(np.uint16) * 257)
    np.testing.assert_array_equal(read_rgb(tmp_path / "sixteen.png"), rgb)
    assert cosine_distance(embed_file(tmp_path / "eight.png"), embed_file(tmp_path / "sixteen.png")) < 1e-3


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I;16L", "I"])
def test_sixteen_bit_modes_divide_by_257_rounded(mode: str) -> None:
    values = np.array([[0, 1, 128, 129, 257, 385, 386, 257 * 200, 65534, 65535]], dtype=np.int64)
    dtype = {"I;16": "<u2", "I;16B": ">u2", "I;16L": "<u2", "I": "<i4"}[mode]
    image = Image.frombytes(mode, (values.shape[1], 1), values.astype(dtype).tobytes())
    assert image.mode == mode
    expected = np.floor(values / 257 + 0.5).astype(np.uint8)  # round(v / 257)
    out = rgb_array(image)
    assert out.dtype == np.uint8 and out.shape == (1, values.shape[1], 3)
    for channel in range(3):
        np.testing.assert_array_equal(out[..., channel], expected)


def test_mode_i_is_clipped_to_sixteen_bits() -> None:
    image = Image.frombytes("I", (3, 1), np.array([-5, 70000, 65535], "<i4").tobytes())
    assert rgb_array(image)[0, :, 0].tolist() == [0, 255, 255]


def test_float_images_are_mapped_from_their_own_range(tmp_path: Path) -> None:
    gray = gray_picture()
    Image.fromarray(gray).save(tmp_path / "eight.png")
    floats = 0.1 + 0.7 * gray.astype(np.float32) / 255.0  # any range: 0.1 … 0.8 here
    Image.fromarray(floats, mode="F").save(tmp_path / "float.tif")
    with Image.open(tmp_path / "float.tif") as opened:
        assert opened.mode == "F"
    out = read_rgb(tmp_path / "float.tif")
    low, high = int(gray.min()), int(gray.max())
    stretched = np.rint((gray.astype(np.float64) - low) * 255.0 / (high - low))
    np.testing.assert_allclose(out[..., 0], stretched, atol=1)
    assert out.min() == 0 and out.max() == 255
    assert cosine_distance(embed_file(tmp_path / "eight.png"), embed_file(tmp_path / "float.tif")) < 1e-3


def test_float_edge_cases() -> None:
    constant = Image.fromarray(np.full((2, 3), 7.5, np.float32), mode="F")
    assert rgb_array(constant).max() == 0
    nan = Image.fromarray(np.array([[np.nan, 0.0, 2.0, np.inf]], np.float32), mode="F")
    assert rgb_array(nan)[0, :, 0].tolist() == [0, 0, 255, 0]
    assert rgb_array(Image.fromarray(np.full((2, 2), np.nan, np.float32), mode="F")).max() == 0


# --------------------------------------------------------------------------- orientation


@pytest.mark.parametrize("orientation", sorted(STORED_FROM_UPRIGHT))
def test_exif_orientation_is_applied(tmp_path: Path, orientation: int) -> None:
    upright = picture(40, 24)
    stored = Image.fromarray(upright).transpose(STORED_FROM_UPRIGHT[orientation])
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "tagged.png"
    stored.save(path, exif=exif)
    np.testing.assert_array_equal(read_rgb(path), upright)


def test_exif_rotated_jpeg_embeds_like_the_upright_picture(tmp_path: Path) -> None:
    upright = picture(64, 40)
    Image.fromarray(upright).save(tmp_path / "upright.jpg", quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(upright).transpose(Image.Transpose.ROTATE_90).save(
        tmp_path / "rotated.jpg", quality=95, exif=exif
    )
    rotated = read_rgb(tmp_path / "rotated.jpg")
    assert rotated.shape == upright.shape
    assert np.abs(rotated.astype(int) - upright).mean() < 3
    embedder = PixelEmbedder(size=(16, 10))
    right = cosine_distance(embed_file(tmp_path / "upright.jpg", embedder), embedder.embed([rotated])[0])
    sideways = np.asarray(Image.fromarray(upright).transpose(Image.Transpose.ROTATE_90))
    wrong = cosine_distance(embed_file(tmp_path / "upright.jpg", embedder), embedder.embed([sideways])[0])
    assert right < 1e-3 < wrong


def test_malformed_exif_is_read_as_upright(tmp_path: Path) -> None:
    path = tmp_path / "odd.jpg"
    exif = Image.Exif()
    exif[0x0112] = 99  # not an orientation
    Image.fromarray(picture()).save(path, exif=exif)
    assert read_rgb(path).shape == (32, 48, 3)


# --------------------------------------------------------------------------- transparency and colour


def on_white(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    a = alpha.astype(np.float64)[..., None] / 255.0
    return rgb.astype(np.float64) * a + 255.0 * (1.0 - a)


def test_rgba_and_la_are_composited_onto_white(tmp_path: Path) -> None:
    rgb = picture()
    alpha = np.tile(np.linspace(0, 255, rgb.shape[1]).astype(np.uint8), (rgb.shape[0], 1))
    Image.fromarray(np.dstack([rgb, alpha])).save(tmp_path / "rgba.png")
    out = read_rgb(tmp_path / "rgba.png")
    np.testing.assert_allclose(out, on_white(rgb, alpha), atol=1)
    assert (out[:, 0] == 255).all()  # fully transparent column: white, not the hidden colour
    gray = gray_picture()
    Image.fromarray(np.dstack([gray, alpha]), mode="LA").save(tmp_path / "la.png")
    expected = on_white(gray[..., None], alpha)[..., 0]
    np.testing.assert_allclose(read_rgb(tmp_path / "la.png")[..., 0], expected, atol=1)


def test_palette_and_colour_key_transparency_become_white(tmp_path: Path) -> None:
    palette = Image.new("P", (4, 2), 0)
    palette.putpalette([0, 0, 0, 200, 10, 10])
    palette.putpixel((1, 0), 1)
    palette.save(tmp_path / "p.png", transparency=0)
    palette.save(tmp_path / "p.gif", transparency=0)
    for name in ("p.png", "p.gif"):
        out = read_rgb(tmp_path / name)
        assert out[0, 0].tolist() == [255, 255, 255], name
        assert out[0, 1].tolist() == [200, 10, 10], name
    keyed = Image.fromarray(np.array([[[1, 2, 3], [9, 9, 9]]], np.uint8))
    keyed.save(tmp_path / "trns.png", transparency=(1, 2, 3))
    assert read_rgb(tmp_path / "trns.png").tolist() == [[[255, 255, 255], [9, 9, 9]]]


def test_premultiplied_and_palette_alpha_modes() -> None:
    for mode in ("RGBa", "La", "PA"):
        image = (
            Image.new("RGBA", (2, 2), (0, 0, 0, 0)).convert(mode) if mode != "La" else Image.new(mode, (2, 2))
        )
        assert rgb_array(image).tolist()[0][0] == [255, 255, 255], mode


def test_cmyk_and_ycbcr_images_convert(tmp_path: Path) -> None:
    rgb = picture()
    Image.fromarray(rgb).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    with Image.open(tmp_path / "cmyk.jpg") as opened:
        assert opened.mode == "CMYK"
    assert np.abs(read_rgb(tmp_path / "cmyk.jpg").astype(int) - rgb).mean() < 3
    Image.fromarray(rgb).convert("YCbCr").save(tmp_path / "ycbcr.jpg", quality=95)
    assert np.abs(read_rgb(tmp_path / "ycbcr.jpg").astype(int) - rgb).mean() < 3
    Image.fromarray(rgb).convert("YCbCr").save(tmp_path / "ycbcr.tif")
    with Image.open(tmp_path / "ycbcr.tif") as opened:
        assert opened.mode == "YCbCr"
    assert np.abs(read_rgb(tmp_path / "ycbcr.tif").astype(int) - rgb).mean() < 3
    assert rgb_array(Image.fromarray(rgb).convert("1")).shape == rgb.shape


def test_animated_images_use_their_first_frame(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (8, 6), colour) for colour in [(255, 0, 0), (0, 0, 255), (0, 255, 0)]]
    for name, options in [("a.gif", {}), ("a.webp", {"lossless": True}), ("a.png", {})]:
        frames[0].save(tmp_path / name, save_all=True, append_images=frames[1:], duration=50, **options)
        with Image.open(tmp_path / name) as opened:
            assert getattr(opened, "n_frames", 1) == 3, name
        out = read_rgb(tmp_path / name)
        assert out.shape == (6, 8, 3) and (out == [255, 0, 0]).all(), name


def test_in_memory_pil_images_follow_the_same_rules(tmp_path: Path) -> None:
    gray = gray_picture()
    sixteen = Image.fromarray(gray.astype(np.uint16) * 257)
    embedder = PixelEmbedder(size=8)
    np.testing.assert_allclose(embedder.embed([sixteen]), embedder.embed([gray_picture_rgb()]), atol=1e-6)
    transparent = Image.new("RGBA", (4, 4), (10, 20, 30, 0))
    assert as_image_list(transparent)[0].tolist()[0][0] == [255, 255, 255]
    Image.fromarray(gray.astype(np.uint16) * 257).save(tmp_path / "q.png")
    np.testing.assert_array_equal(as_image_list(tmp_path / "q.png")[0], as_image_list(sixteen)[0])
    rgb = Image.fromarray(picture())
    assert to_rgb_image(rgb) is rgb  # plain RGB is passed through untouched


def gray_picture_rgb() -> np.ndarray:
    return np.repeat(gray_picture()[..., None], 3, axis=2)


# --------------------------------------------------------------------------- size


def test_large_jpegs_are_drafted_to_at_least_the_size_asked(tmp_path: Path) -> None:
    path = tmp_path / "big.jpg"
    Image.fromarray(picture(2000, 1600)).save(path, quality=90)
    assert read_rgb(path).shape == (1600, 2000, 3)  # no min_size: full size
    assert read_rgb(path, min_size=(64, 64)).shape == (200, 250, 3)  # 1/8
    assert read_rgb(path, min_size=300).shape == (400, 500, 3)  # 1/4 keeps ≥ 300
    assert read_rgb(path, min_size=(900, 10)).shape == (800, 1000, 3)  # 1/2: the width decides
    assert read_rgb(path, min_size=(1200, 10)).shape == (1600, 2000, 3)  # too small to reduce
    Image.fromarray(picture(2000, 1600)).save(tmp_path / "big.png")
    assert read_rgb(tmp_path / "big.png", min_size=64).shape == (1600, 2000, 3)  # JPEG only


def test_draft_counts_the_display_orientation(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "portrait.jpg"
    Image.fromarray(picture(2000, 1000)).save(path, exif=exif)  # shown 1000 wide, 2000 high
    out = read_rgb(path, min_size=(400, 150))
    assert out.shape[1] >= 400 and out.shape[0] >= 150
    assert out.shape == (1000, 500, 3)


@pytest.mark.parametrize("bad", [0, -1, (3,), (3, 0), 2.5, "64", True, (True, 4)])
def test_min_size_is_checked(tmp_path: Path, bad: Any) -> None:
    Image.fromarray(picture()).save(tmp_path / "a.png")
    with pytest.raises(ValueError, match="min_size"):
        read_rgb(tmp_path / "a.png", min_size=bad)


def test_store_drafts_to_twice_the_embedders_input_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big, small = tmp_path / "big.jpg", tmp_path / "small.png"
    Image.fromarray(picture(1600, 1200)).save(big, quality=90)
    Image.fromarray(picture()).save(small)
    asked: list[Any] = []
    real_draft = JpegImagePlugin.JpegImageFile.draft

    def spy(self: Any, mode: Any, size: Any) -> Any:
        asked.append(size)
        return real_draft(self, mode, size)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    embedder = PixelEmbedder(size=(32, 24))
    assert embedder.input_size == (32, 24)
    store = InMemoryImageEmbeddingStore([str(big), str(small)], embedder)
    store.build_store()
    assert asked == [(64, 48)]
    drafted = read_rgb(big, min_size=(64, 48))
    assert drafted.shape == (150, 200, 3)
    np.testing.assert_array_equal(store.embeddings_of([str(big)]), embedder.embed([drafted]))
    # A query by path goes through the same reader, so it finds its own gallery entry at distance 0.
    asked.clear()
    best = store.retrieve_top_k_similar(str(big), 1)[0][0]
    assert asked == [(64, 48)] and best.path == str(big) and best.score == pytest.approx(0.0, abs=1e-5)
    assert reader_for(object()).keywords == {"min_size": None}


def test_draft_leaves_small_and_non_jpeg_images_alone(tmp_path: Path) -> None:
    Image.fromarray(picture(100, 80)).save(tmp_path / "small.jpg")
    with Image.open(tmp_path / "small.jpg") as image:
        draft_for(image, (64, 64))  # 100 < 2 × 64: nothing to gain
        assert image.size == (100, 80)


# --------------------------------------------------------------------------- errors


def test_decompression_bomb_is_an_image_read_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.png"
    Image.new("RGB", (100, 100)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 10,000 pixels is over twice the limit
    with pytest.raises(ImageReadError, match=r"bomb\.png.*decompression bomb") as info:
        read_rgb(path)
    assert info.value.path == str(path) and "decompression bomb" in (info.value.reason or "")
    with pytest.raises(ImageReadError, match="decompression bomb"):
        read_rgb(path, min_size=8)  # a draft does not lift the limit


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"not an image", "cannot identify image file"), (None, "No such file or directory")],
)
def test_read_errors_name_the_path_and_a_reason(tmp_path: Path, content: bytes | None, reason: str) -> None:
    path = tmp_path / "bad.png"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageReadError) as info:
        read_rgb(path)
    assert info.value.path == str(path) and info.value.reason == reason
    assert str(info.value) == f"cannot read image {str(path)!r}: {reason}"


def test_non_regular_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    for path in (fifo, tmp_path):
        with pytest.raises(ImageReadError, match="not a regular file") as info:
            read_rgb(path)
        assert info.value.path == str(path)


def test_truncated_image_is_an_image_read_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.png"
    Image.fromarray(picture()).save(path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ImageReadError, match=r"cut\.png"):
        read_rgb(path)


# --------------------------------------------------------------------------- skipped images


def make_gallery(folder: Path) -> tuple[list[str], str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(3):
        path = folder / f"img{index}.png"
        Image.fromarray(np.roll(picture(), index * 5, axis=1)).save(path)
        paths.append(str(path))
    broken = folder / "broken.png"
    broken.write_bytes(b"not an image")
    return [*paths, str(broken)], str(broken)


def test_skipped_images_warn_with_a_filterable_galleria_class(tmp_path: Path) -> None:
    paths, broken = make_gallery(tmp_path)
    store = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), skip_errors=True)
    with pytest.warns(SkippedImageWarning) as record:
        store.build_store()
    assert [str(item.message) for item in record] == [f"skipped {broken}: cannot identify image file"]
    warning = record[0].message
    assert isinstance(warning, SkippedImageWarning) and isinstance(warning, UserWarning)
    assert isinstance(warning, RuntimeWarning)  # what galleria raised before, so old filters still match
    assert warning.path == broken and warning.reason == "cannot identify image file"
    again = InMemoryImageEmbeddingStore(paths, PixelEmbedder(size=8), skip_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=SkippedImageWarning)
        again.build_store()  # filtered by its class: nothing raised
    assert again.skipped == [broken]


def test_cli_skip_errors_prints_one_line_per_skipped_file(tmp_path: Path) -> None:
    _, broken = make_gallery(tmp_path / "photos")
    cut = tmp_path / "photos" / "cut.jpg"
    Image.fromarray(picture()).save(cut)
    cut.write_bytes(cut.read_bytes()[:100])
    out = tmp_path / "s.safetensors"
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "galleria",
            "build",
            str(tmp_path / "photos"),
            "--out",
            str(out),
            "--skip-errors",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and f"skipped {broken}: cannot identify image file" in lines
    assert any(line.startswith(f"skipped {cut}: ") for line in lines)
    assert "Warning" not in process.stderr and "warn(" not in process.stderr
    assert process.stdout.strip() == f"indexed 3 image(s), skipped 2 → {out}"
