"""``galleria search --embedder SPEC``: searching by image a store that records no embedder.

A clip-retrieval folder is written as clip-retrieval lays it out (two ``img_emb`` parts, a parquet
per part with paths and captions) from the pixel embeddings of real images (scikit-learn's digits),
imported, and searched by image with the pixel embedder named on the command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from _support.extras import need

pa = need("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
need("sklearn")

from galleria import InMemoryImageEmbeddingStore  # noqa: E402
from galleria.cli import main  # noqa: E402
from galleria.cli._query_embedder import check_space  # noqa: E402
from galleria.datasets import digits_folder, list_images  # noqa: E402
from galleria.embedders import PixelEmbedder  # noqa: E402

SPEC = "pixel:16"
PARTS = (14, 10)


def fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``main(args)``: it must return 2 and print exactly one line on stderr."""
    capsys.readouterr()
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def pictures(paths: list[str]) -> list[np.ndarray]:
    return [np.asarray(Image.open(path).convert("RGB")) for path in paths]


def save(target: Path, paths: list[str], embedder: PixelEmbedder) -> Path:
    vectors = embedder.embed(pictures(paths))
    InMemoryImageEmbeddingStore.from_embeddings(paths, vectors, embedder).save_to_disk(target)
    return target


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """An imported clip-retrieval store of pixel embeddings of 24 digit images (and their paths)."""
    root = tmp_path_factory.mktemp("cr")
    folder = digits_folder(root / "cache")
    images = list_images(folder)[:: 1797 // sum(PARTS)][: sum(PARTS)]
    vectors = PixelEmbedder(size=16).embed(pictures(images))
    (root / "out" / "img_emb").mkdir(parents=True)
    (root / "out" / "metadata").mkdir()
    start = 0
    for number, rows in enumerate(PARTS):
        part = vectors[start : start + rows].astype("<f2")
        np.save(root / "out" / "img_emb" / f"img_emb_{number}.npy", part)
        table = {
            "image_path": images[start : start + rows],
            "caption": [f"digit {start + row}" for row in range(rows)],
        }
        pq.write_table(pa.table(table), root / "out" / "metadata" / f"metadata_{number}.parquet")
        start += rows
    store = root / "imported.safetensors"
    assert main(["import", "clip-retrieval", str(root / "out"), "--out", str(store)]) == 0
    return store, images


def test_search_by_image_with_the_named_embedder(
    imported: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    store, images = imported
    queries = [images[0], images[9], images[20]]
    capsys.readouterr()
    assert main(["search", str(store), "--image", *queries, "--embedder", SPEC, "-k", "3", "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)["queries"]
    assert [answer["results"][0]["path"] for answer in answers] == queries


def test_the_python_equivalent(imported: tuple[Path, list[str]]) -> None:
    store_path, images = imported
    store = InMemoryImageEmbeddingStore.load_from_disk(store_path, embedder=PixelEmbedder(size=16))
    assert store.retrieve_top_k_similar([images[5]], 1)[0][0].path == images[5]
    with pytest.raises(ValueError, match="dimension 192"):
        InMemoryImageEmbeddingStore.load_from_disk(store_path, embedder=PixelEmbedder(size=8))


def test_refusals_are_one_line(imported: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    store, images = imported
    line = fails(capsys, "search", str(store), "--image", images[0])
    assert "records no embedder" in line and "--embedder SPEC" in line
    line = fails(capsys, "search", str(store), "--image", images[0], "--embedder", "pixel:8")
    assert "dimension 192" in line and "dimension 768" in line
    line = fails(capsys, "search", str(store), "--text", "a seven", "--embedder", SPEC)
    assert "text side" in line and "PixelEmbedder" in line
    line = fails(capsys, "search", str(store), "--image", images[0], "--embedder", "nope")
    assert "unknown embedder" in line


def test_a_store_with_its_own_embedder_takes_the_same_model_only(
    tmp_path: Path, imported: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, images = imported
    embedder = PixelEmbedder(size=8, batch_size=7)
    store = save(tmp_path / "own.safetensors", images, embedder)
    capsys.readouterr()
    assert main(["search", str(store), "--image", images[3], "--embedder", "pixel:8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queries"][0]["results"][0]["path"] == images[3]
    line = fails(capsys, "search", str(store), "--image", images[3], "--embedder", "pixel:8:gray")
    assert "dimension 64" in line
    wide = PixelEmbedder(size=(16, 4))  # 192 values too, from another thumbnail: another model
    wide_store = save(tmp_path / "wide.safetensors", images, wide)
    line = fails(capsys, "search", str(wide_store), "--image", images[3], "--embedder", "pixel:8")
    assert "is not the model" in line and "pixel" in line
    grey = PixelEmbedder(size=8, grayscale=True)
    grey_store = save(tmp_path / "grey.safetensors", images, grey)
    assert main(["search", str(grey_store), "--image", images[3], "--embedder", "pixel:8:gray"]) == 0


class _Declares:
    def __init__(self, space: str) -> None:
        self.space = space


def test_the_space_an_embedder_declares_is_checked() -> None:
    check_space(PixelEmbedder(), "l2", "e")  # unit vectors, no declared space: any store
    check_space(_Declares("ip"), "cosine", "e")  # unit vectors rank alike in both
    with pytest.raises(ValueError, match=r"space 'l2'.*space is 'ip'"):
        check_space(_Declares("l2"), "ip", "e")
