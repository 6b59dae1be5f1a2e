"""A dependency-free embedder: resized pixels, centred and L2-normalised."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from galleria._declare import Component
from galleria._params import Param
from galleria._validation import MAX_VECTOR_DIM, check_bool, check_positive_int
from galleria.distances import normalize_rows
from galleria.embedders._config import MAX_CONFIG_BATCH_SIZE, check_config, config_bool, config_int
from galleria.embedders._images import check_images, to_pil
from galleria.embedders.base import ImageInput

__all__ = ["MAX_CONFIG_DIM", "MAX_CONFIG_SIDE", "PixelEmbedder"]

_CONFIG_KEYS = frozenset({"type", "size", "grayscale", "batch_size"})
#: Bounds on a config's thumbnail (a store file is untrusted): each side, and width × height × channels.
MAX_CONFIG_SIDE = 1024
MAX_CONFIG_DIM = MAX_VECTOR_DIM
#: Most floats one batch of a config's embedder may hold (batch_size × dim): 256 MiB.
MAX_CONFIG_BATCH_FLOATS = 1 << 26


def _check_size(size: Any) -> tuple[int, int]:
    if isinstance(size, (tuple, list)):
        if len(size) != 2:
            raise ValueError(f"size must be an int or a (width, height) pair, got {size!r}")
        return check_positive_int("size[0]", size[0]), check_positive_int("size[1]", size[1])
    side = check_positive_int("size", size)
    return side, side


class PixelEmbedder:
    """Embed images as their resized pixels: a fast baseline that needs only numpy and Pillow.

    Each image is converted to RGB (or grayscale), resized to ``size`` with bilinear filtering,
    flattened, centred (its mean pixel value subtracted) and scaled to unit L2 norm. A constant
    image therefore embeds to the zero vector.

    Parameters
    ----------
    size : int or (int, int)
        Side of the square thumbnail, or its (width, height).
    grayscale : bool
        Use one luminance channel instead of three colour channels.
    batch_size : int
        Images per :meth:`embed` call when a store feeds this embedder.

    Examples
    --------
    >>> import numpy as np
    >>> embedder = PixelEmbedder(size=8)
    >>> image = np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3)
    >>> vectors = embedder.embed([image])
    >>> vectors.shape, round(float(np.linalg.norm(vectors[0])), 4)
    ((1, 192), 1.0)
    """

    def __init__(
        self, size: int | tuple[int, int] = 32, grayscale: bool = False, batch_size: int = 256
    ) -> None:
        self._size = _check_size(size)
        self._grayscale = check_bool("grayscale", grayscale)
        self.batch_size = check_positive_int("batch_size", batch_size)
        if self.dim > MAX_VECTOR_DIM:  # a store of such vectors could not be saved or loaded
            raise ValueError(
                f"size {size!r} gives {self.dim} dimensions (width × height × "
                f"{1 if self._grayscale else 3}); galleria stores at most {MAX_VECTOR_DIM}"
            )

    def __repr__(self) -> str:
        return f"PixelEmbedder(size={self._size}, grayscale={self._grayscale}, batch_size={self.batch_size})"

    @property
    def size(self) -> tuple[int, int]:
        """The thumbnail's (width, height)."""
        return self._size

    @property
    def grayscale(self) -> bool:
        """Whether one luminance channel is used."""
        return self._grayscale

    @property
    def input_size(self) -> tuple[int, int]:
        """The (width, height) images are resized to (a store decodes large JPEGs to twice this)."""
        return self._size

    @property
    def dim(self) -> int:
        """Length of the embedding: width × height × channels."""
        return self._size[0] * self._size[1] * (1 if self._grayscale else 3)

    def _pixels(self, image: Image.Image) -> np.ndarray:
        mode = "L" if self._grayscale else "RGB"
        if image.mode != mode:
            image = image.convert(mode)
        if image.size != self._size:
            image = image.resize(self._size, Image.Resampling.BILINEAR)
        return np.asarray(image, dtype=np.float32).reshape(-1)

    def embed(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Return the (len(images), dim) float32 embeddings of RGB uint8 arrays or PIL images."""
        items = check_images(images)
        vectors = np.empty((len(items), self.dim), dtype=np.float32)
        for position, image in enumerate(items):
            vectors[position] = self._pixels(to_pil(image, position))
        vectors -= vectors.mean(axis=1, keepdims=True)
        return normalize_rows(vectors)

    def config(self) -> dict[str, Any]:
        """A JSON-able description from which :meth:`from_config` rebuilds this embedder."""
        return {
            "type": "pixel",
            "size": list(self._size),
            "grayscale": self._grayscale,
            "batch_size": self.batch_size,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PixelEmbedder:
        """Rebuild an embedder from :meth:`config` output, checking every value first.

        Raises
        ------
        TypeError
            If ``config`` is not a mapping.
        ValueError
            For another type, an unknown key, or a value of the wrong type or out of bounds: each side
            of ``size`` at most :data:`MAX_CONFIG_SIDE`, the dimension at most :data:`MAX_CONFIG_DIM`,
            ``batch_size`` at most 4096, ``grayscale`` a bool.
        """
        check_config(config, "pixel", _CONFIG_KEYS)
        size = config.get("size", 32)
        if isinstance(size, (list, tuple)):
            if len(size) != 2:
                raise ValueError(f"pixel embedder config: size must be [width, height], got {size!r}")
            width = config_int("pixel", "size[0]", size[0], MAX_CONFIG_SIDE)
            height = config_int("pixel", "size[1]", size[1], MAX_CONFIG_SIDE)
        else:
            width = height = config_int("pixel", "size", size, MAX_CONFIG_SIDE)
        grayscale = config_bool("pixel", "grayscale", config.get("grayscale", False))
        dim = width * height * (1 if grayscale else 3)
        if dim > MAX_CONFIG_DIM:
            raise ValueError(
                f"pixel embedder config: size {[width, height]} gives {dim} dimensions, "
                f"more than {MAX_CONFIG_DIM}"
            )
        batch_size = config_int("pixel", "batch_size", config.get("batch_size", 256), MAX_CONFIG_BATCH_SIZE)
        if batch_size * dim > MAX_CONFIG_BATCH_FLOATS:
            raise ValueError(
                f"pixel embedder config: batch_size {batch_size} × {dim} dimensions is more than "
                f"{MAX_CONFIG_BATCH_FLOATS} floats per batch"
            )
        return cls(size=(width, height), grayscale=grayscale, batch_size=batch_size)


def parse_spec(rest: str) -> dict[str, Any]:
    """The options of ``--embedder pixel[:SIZE][:gray]`` (``rest`` follows ``pixel:``); ValueError
    phrased after the spelling (``is malformed: ...``)."""
    options: dict[str, Any] = {"size": 32, "grayscale": False}
    parts = rest.split(":") if rest else []
    if len(parts) > 2:
        raise ValueError("is malformed: expected pixel[:SIZE][:gray]")
    for position, part in enumerate(parts):
        if part == "gray" and position == len(parts) - 1:
            options["grayscale"] = True
        elif position == 0 and part.isdigit() and int(part) > 0:
            options["size"] = int(part)
        else:
            raise ValueError(
                f"is malformed: {part!r} is neither a positive thumbnail size nor 'gray' (expected "
                "pixel[:SIZE][:gray])"
            )
    return options


def _from_config(config: Mapping[str, Any], *, checkpoint: Any = None) -> PixelEmbedder:
    if checkpoint is not None:
        raise ValueError(f"a pixel embedder takes no checkpoint, but checkpoint={checkpoint!r} was given")
    return PixelEmbedder.from_config(config)


#: The declaration of the pixel embedder (:mod:`galleria._declare`): the registry finds it here.
COMPONENT = Component(
    kind="embedder",
    name="pixel",
    summary="resized pixels, centred and L2-normalised: no model, no extra",
    params=(
        Param("size", int, 32, 1, MAX_CONFIG_SIDE, help="thumbnail side in pixels"),
        Param("grayscale", bool, False, help="one gray channel instead of RGB"),
        Param("batch_size", int, 256, 1, MAX_CONFIG_BATCH_SIZE, help="images embedded per batch"),
    ),
    build=PixelEmbedder,
    order=0,
    extra={"spec": "pixel[:SIZE][:gray]", "parse_spec": parse_spec, "from_config": _from_config},
)
