"""Issue 15 §1: one image reader for every image galleria touches (uploads, queries, thumbnails, report)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from _support.image_kinds import png_bomb, write_image_kinds
from galleria import InMemoryImageEmbeddingStore, PixelEmbedder
from galleria.images.reading import (
    DEFAULT_MAX_PIXELS,
    ImageReadError,
    ImageTooLargeError,
    decode_rgb,
    draft_size_for,
    read_rgb,
    read_rgb_image,
    reader_for,
)
from galleria.viewer import UploadError, decode_upload
from galleria.viewer.thumbnails import ThumbnailCache, make_thumbnail

SRC = Path(__file__).resolve().parents[2] / "src" / "galleria"


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_image_kinds(tmp_path_factory.mktemp("kinds") / "gallery")


@pytest.fixture(scope="module")
def store(kinds: dict[str, Path]) -> InMemoryImageEmbeddingStore:
    built = InMemoryImageEmbeddingStore(
        [str(p) for p in kinds.values()], PixelEmbedder(size=8), num_workers=1
    )
    built.build_store(progress=False)
    return built


def test_decode_rgb_gives_the_pixels_read_rgb_gives(kinds: dict[str, Path]) -> None:
    for size in (None, (16, 16)):
        for name, path in kinds.items():
            from_file = read_rgb(path, size)
            data = path.read_bytes()
            np.testing.assert_array_equal(decode_rgb(data, size), from_file, err_msg=name)
            with open(path, "rb") as handle:
                np.testing.assert_array_equal(decode_rgb(handle, size), from_file, err_msg=name)
            np.testing.assert_array_equal(decode_rgb(memoryview(data), size), from_file, err_msg=name)
            for source in (path, str(path), data):
                picture = read_rgb_image(source, size, max_pixels=None)
                assert picture.mode == "RGB", name
                np.testing.assert_array_equal(np.asarray(picture), from_file, err_msg=name)


def test_decode_rgb_errors_name_the_argument() -> None:
    with pytest.raises(ImageReadError, match=r"'q\.png': empty"):
        decode_rgb(b"", name="q.png")
    with pytest.raises(ImageReadError, match="cannot identify"):
        decode_rgb(b"<svg xmlns='http://www.w3.org/2000/svg'/>")
    with pytest.raises(TypeError, match="data must be bytes or a binary file object, got str"):
        decode_rgb("a.png")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_pixels must be None or a positive int, got 0"):
        decode_rgb(b"x", max_pixels=0)
    with pytest.raises(ValueError, match="max_pixels"):
        read_rgb("a.png", max_pixels=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be a str"):
        decode_rgb(b"x", name=3)  # type: ignore[arg-type]
    with pytest.raises(ImageReadError, match="not a regular file"):
        read_rgb_image(SRC)
    with pytest.raises(ImageReadError, match="'up': empty"):
        read_rgb_image(b"", name="up")
    with pytest.raises(TypeError, match="data must be bytes or a binary file object, got int"):
        read_rgb_image(3)  # type: ignore[arg-type]


def test_pixel_limit_is_checked_from_the_header(tmp_path: Path) -> None:
    bomb = png_bomb(tmp_path / "wide.png", 12_000, 12_000)  # 144 Mpx in a few kB
    assert bomb.stat().st_size < 100_000
    with pytest.raises(
        ImageTooLargeError, match="144,000,000 pixels, over the limit of 64,000,000"
    ) as caught:
        read_rgb(bomb, max_pixels=DEFAULT_MAX_PIXELS)
    assert caught.value.pixels == 144_000_000 and caught.value.path == str(bomb)
    with pytest.raises(ImageTooLargeError):
        decode_rgb(bomb.read_bytes())  # the default limit of in-memory images
    huge = png_bomb(tmp_path / "huge.png", 15_000, 15_000)  # over Pillow's own bomb limit
    with pytest.raises(ImageTooLargeError, match="decompression bomb") as caught:
        read_rgb(huge)
    assert caught.value.pixels == 225_000_000
    small = tmp_path / "small.png"
    Image.new("RGB", (100, 100)).save(small)
    with pytest.raises(ImageTooLargeError, match="10,000 pixels, over the limit of 9,999"):
        read_rgb(small, max_pixels=9_999)
    assert read_rgb(small, max_pixels=10_000).shape == (100, 100, 3)
    # A JPEG is judged by the size it is decoded at: drafted to 1/8, 800×600 is 100×75 pixels.
    photo = tmp_path / "photo.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (600, 800, 3), dtype=np.uint8)).save(photo)
    assert read_rgb(photo, (16, 16), max_pixels=10_000).shape == (75, 100, 3)
    with pytest.raises(ImageTooLargeError, match="800×600 is 480,000 pixels"):
        read_rgb(photo, max_pixels=10_000)


def test_every_gallery_image_uploaded_back_is_its_own_rank_one(
    kinds: dict[str, Path], store: InMemoryImageEmbeddingStore
) -> None:
    """The target of the issue: rank 1 at distance ≤ 1e-5 for every kind the tests know."""
    draft = draft_size_for(store.embedder)
    assert draft == (16, 16)
    for name, path in kinds.items():
        pixels = decode_upload(path.read_bytes(), max_bytes=1 << 24, min_size=draft)
        best = store.retrieve_top_k_similar(pixels, 2)[0]
        assert best[0].path == str(path), (name, best)
        assert best[0].score <= 1e-5, (name, best[0].score)
        assert best[1].score > 1e-3, name


def test_uploads_over_the_limits(tmp_path: Path) -> None:
    bomb = png_bomb(tmp_path / "wide.png", 12_000, 12_000).read_bytes()
    with pytest.raises(UploadError, match="144,000,000 pixels, over the limit of 64,000,000") as caught:
        decode_upload(bomb, max_bytes=1 << 20)
    assert caught.value.too_large
    with pytest.raises(UploadError, match="over the limit of 1,000 pixels") as caught:
        decode_upload(
            png_bomb(tmp_path / "h.png", 15_000, 15_000).read_bytes(), max_bytes=1 << 20, max_pixels=1000
        )
    assert caught.value.too_large
    for junk in (
        b"<html><script>alert(1)</script></html>",
        b"root:x:0:0:root:/root:/bin/bash\n",
        b"\x89PNG\r\n",
    ):
        with pytest.raises(UploadError, match="not an image") as caught:
            decode_upload(junk, max_bytes=1 << 20)
        assert not caught.value.too_large


def test_thumbnails_use_the_reader(kinds: dict[str, Path], tmp_path: Path) -> None:
    stamp = tmp_path / "stamp.png"
    pixels = np.zeros((64, 64, 4), np.uint8)  # black, transparent around a red square
    pixels[16:48, 16:48] = (220, 0, 0, 255)
    Image.fromarray(pixels, mode="RGBA").save(stamp)
    with Image.open(io.BytesIO(make_thumbnail(stamp, 32))) as thumb:
        corner = np.asarray(thumb.convert("RGB"))[0, 0]
    assert (corner > 245).all(), corner  # a white background, not black
    with Image.open(io.BytesIO(make_thumbnail(kinds["exif_rotated.jpg"], 40))) as thumb:
        assert thumb.size == (40, 27)  # stored 32×48, shown upright as 48×32
    with Image.open(io.BytesIO(make_thumbnail(kinds["grey16.png"], 48))) as thumb:
        assert abs(int(np.asarray(thumb.convert("L")).mean()) - int(read_rgb(kinds["grey16.png"]).mean())) < 4


def test_thumbnails_of_bombs_are_refused_before_decoding(tmp_path: Path) -> None:
    bomb = png_bomb(tmp_path / "wide.png", 12_000, 12_000)
    with pytest.raises(ImageTooLargeError):
        make_thumbnail(bomb)
    cache = ThumbnailCache(size=32)
    with pytest.raises(ImageTooLargeError):
        cache.get(str(bomb))
    assert len(cache) == 0
    calls: list[Any] = []

    def reader(key: str, min_size: Any, limit: Any) -> np.ndarray:
        calls.append((key, min_size, limit))
        return np.zeros((10, 20, 3), np.uint8)

    custom = ThumbnailCache(size=32, max_pixels=5000, reader=reader)
    assert custom.get("anything") is custom.get("anything")
    assert calls == [("anything", (32, 32), 5000)]
    with pytest.raises(ValueError, match="max_pixels"):
        ThumbnailCache(max_pixels=0)


def test_report_contact_sheets_use_the_reader(tmp_path: Path) -> None:
    """The report's thumbnails come from make_thumbnail, hence the reader: alpha on white there too."""
    from galleria.evaluation import report

    assert report.make_thumbnail is make_thumbnail


def test_cli_queries_are_read_with_the_gallery_draft(kinds: dict[str, Path], store: Any) -> None:
    from galleria.cli.search import _image_queries

    kept, arrays, bad = _image_queries([str(kinds["large.jpg"])], False, store.embedder)
    np.testing.assert_array_equal(arrays[0], reader_for(store.embedder)(str(kinds["large.jpg"])))
    assert arrays[0].shape[0] < 600 and not bad and kept


def test_no_other_module_opens_an_image_with_pillow() -> None:
    """galleria.images.reading is the one place that calls Image.open (its rules: images.decoding)."""
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"\bImage\.open\(|\bImageFile\.Parser\(|\bImage\.frombytes\(", text):
            offenders.append(str(path.relative_to(SRC)))
    assert offenders == ["images/reading.py"], offenders


def test_no_pillow_warning_reaches_stderr(kinds: dict[str, Path], tmp_path: Path) -> None:
    """A fresh interpreter (default warning filters) reading every kind, odd EXIF and near-bombs: silent."""
    odd = tmp_path / "odd_exif.jpg"
    exif = Image.Exif()
    exif[0x0112] = 99
    Image.new("RGB", (8, 8)).save(odd, exif=exif)
    truncated_exif = tmp_path / "bad_exif.png"
    Image.new("RGB", (8, 8)).save(truncated_exif, exif=b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x05")
    near = png_bomb(tmp_path / "near.png", 10_000, 10_000)  # over Pillow's warning threshold (89 Mpx)
    script = f"""
import sys
from pathlib import Path
from galleria.images.reading import read_rgb, decode_rgb, ImageReadError
from galleria.viewer.thumbnails import make_thumbnail
paths = {[str(p) for p in kinds.values()] + [str(odd), str(truncated_exif)]!r}
for path in paths:
    read_rgb(path); read_rgb(path, 16); decode_rgb(Path(path).read_bytes(), 16); make_thumbnail(path)
for call in (lambda: read_rgb({str(near)!r}, max_pixels=64_000_000), lambda: make_thumbnail({str(near)!r})):
    try:
        call()
    except ImageReadError:
        pass
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and done.stderr == "", done.stderr
