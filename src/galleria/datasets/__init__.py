"""Datasets: labelled image folders on disk, query/gallery splits, and the demo's digits.

- :func:`load_image_folder` reads any ``root/<label>/<image>`` tree; :func:`list_images` lists the
  images under an unlabelled folder.
- :func:`stratified_split` / :meth:`ImageFolder.split` draw a seeded query/gallery split,
  stratified by label, from a query count or a fraction.
- :func:`digits_folder` writes scikit-learn's 1,797 handwritten digits once as PNG files into the
  cache folder (extra ``galleria[demo]``) and returns that labelled folder.
"""

from __future__ import annotations

from galleria.datasets.digits import DIGITS_COUNT, default_cache_dir, digits_folder
from galleria.datasets.folder import (
    IMAGE_EXTENSIONS,
    ImageFolder,
    QueryGallerySplit,
    list_images,
    load_image_folder,
    stratified_split,
)

__all__ = [
    "DIGITS_COUNT",
    "IMAGE_EXTENSIONS",
    "ImageFolder",
    "QueryGallerySplit",
    "default_cache_dir",
    "digits_folder",
    "list_images",
    "load_image_folder",
    "stratified_split",
]
