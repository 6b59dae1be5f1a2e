"""What a settings file was tuned on, and the check that an evaluation does not test on it.

``galleria tune`` holds out the test queries ``galleria evaluate`` draws (same seed and share) and
tunes on the rest. :func:`split_record` writes down that split in the settings file, under
``"tuned_on"``: the seed and size of the held-out split, a digest of its query paths, a digest of
the tuned-on gallery, and a short hash of every tuned-on path (so that an overlap can be counted
without the file holding the paths themselves). :func:`check_tuned_split` is what ``evaluate
--settings`` calls: it refuses test queries the settings were tuned on, a different split, and a
different gallery.

Paths are compared as given (the CLI passes absolute paths), each hashed with BLAKE2b to 8 bytes.

Examples
--------
>>> record = split_record(seed=0, split_option={"query_fraction": 0.1},
...                       test_paths=["/g/a/1.png"], tuned_paths=["/g/a/2.png", "/g/b/3.png"])
>>> record["test_split"]["count"], record["gallery"]["n_images"]
(1, 2)
>>> check_tuned_split(record, seed=0, split_option={"query_fraction": 0.1}, test_paths=["/g/a/1.png"],
...                   gallery_paths=["/g/a/2.png", "/g/b/3.png"], where="tuned.json")
>>> check_tuned_split(record, seed=0, split_option={"query_fraction": 0.1},  # doctest: +ELLIPSIS
...     test_paths=["/g/a/2.png"], gallery_paths=["/g/a/1.png", "/g/b/3.png"], where="tuned.json")
Traceback (most recent call last):
...
ValueError: tuned.json held out other test queries than this evaluation draws with the same split ...
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["HASH_BYTES", "check_tuned_split", "path_digest", "path_hashes", "split_record"]

#: Bytes of each path's hash in the record (collisions among 10⁶ paths: about 3·10⁻⁸).
HASH_BYTES = 8
#: The split options a record may hold (those of ``ImageFolder.split``).
_SPLIT_KEYS = ("n_queries", "query_fraction")


def _encode(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def path_digest(paths: Iterable[str]) -> str:
    """The SHA-256 of the sorted paths, one per line: one identity for a set of images.

    >>> path_digest(["b", "a"]) == path_digest(["a", "b"])
    True
    """
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(_encode(path) + b"\n")
    return digest.hexdigest()


def _hash(path: str) -> bytes:
    return hashlib.blake2b(_encode(path), digest_size=HASH_BYTES).digest()


def path_hashes(paths: Iterable[str]) -> str:
    """The sorted 8-byte hashes of ``paths``, concatenated and base64-encoded."""
    return base64.b64encode(b"".join(sorted({_hash(path) for path in paths}))).decode("ascii")


def _decode_hashes(text: Any, where: str) -> set[bytes]:
    if not isinstance(text, str):
        raise ValueError(f"{where}: tuned_on.gallery.path_hashes must be a base64 string")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"{where}: tuned_on.gallery.path_hashes is not base64: {error}") from None
    if len(raw) % HASH_BYTES:
        raise ValueError(f"{where}: tuned_on.gallery.path_hashes has a length that is not a multiple of 8")
    if not raw:  # an empty list would turn the leak check off: a tuning always tunes on images
        raise ValueError(f"{where}: tuned_on.gallery.path_hashes is empty; it must list the tuned-on images")
    return {raw[start : start + HASH_BYTES] for start in range(0, len(raw), HASH_BYTES)}


def _check_gallery_record(gallery: Mapping[str, Any], where: str) -> set[bytes]:
    """The tuned-on images' hashes, which must be as many as the record's ``n_images`` says."""
    tuned = _decode_hashes(gallery.get("path_hashes"), where)
    count = gallery.get("n_images")
    if count is not None and (not _is_count(count) or count != len(tuned)):
        raise ValueError(
            f"{where}: tuned_on.gallery.n_images is {count!r}, but tuned_on.gallery.path_hashes holds "
            f"{len(tuned)} images"[:300]
        )
    return tuned


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_split_record(held_out: Mapping[str, Any], where: str) -> None:
    """Each field of ``tuned_on.test_split`` has its type (ValueError naming the file and the key)."""
    seed = held_out.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(
            f"{where}: tuned_on.test_split.seed must be a non-negative integer, got {seed!r}"[:300]
        )
    if "n_queries" in held_out and not _is_count(held_out["n_queries"]):
        count = held_out["n_queries"]
        raise ValueError(
            f"{where}: tuned_on.test_split.n_queries must be a positive integer, got {count!r}"[:300]
        )
    if "query_fraction" in held_out:
        fraction = held_out["query_fraction"]
        if (
            not isinstance(fraction, (int, float))
            or isinstance(fraction, bool)
            or not math.isfinite(fraction)
            or not 0 < fraction < 1
        ):
            raise ValueError(
                f"{where}: tuned_on.test_split.query_fraction must be a number in (0, 1), got {fraction!r}"[
                    :300
                ]
            )
    if not isinstance(held_out.get("digest"), str):
        raise ValueError(f"{where}: tuned_on.test_split.digest must be a string")


def split_record(
    *,
    seed: int,
    split_option: Mapping[str, Any],
    test_paths: Sequence[str],
    tuned_paths: Sequence[str],
) -> dict[str, Any]:
    """The ``"tuned_on"`` record of a settings file: the held-out test split and the tuned-on gallery."""
    return {
        "test_split": {
            "seed": int(seed),
            **{key: split_option[key] for key in _SPLIT_KEYS if key in split_option},
            "count": len(test_paths),
            "digest": path_digest(test_paths),
        },
        "gallery": {
            "n_images": len(tuned_paths),
            "digest": path_digest(tuned_paths),
            "path_hashes": path_hashes(tuned_paths),
        },
    }


def _split_words(seed: Any, option: Mapping[str, Any]) -> str:
    if "query_fraction" in option:
        return f"--seed {seed} --query-fraction {option['query_fraction']:g}"
    return f"--seed {seed} --n-queries {option.get('n_queries')}"


def check_tuned_split(
    record: Any,
    *,
    seed: int,
    split_option: Mapping[str, Any],
    test_paths: Sequence[str],
    gallery_paths: Sequence[str],
    where: str,
) -> None:
    """Refuse (ValueError, one line) an evaluation the settings in ``record`` would leak into.

    ``record`` is the ``"tuned_on"`` object of a settings file; ``seed`` / ``split_option`` /
    ``test_paths`` / ``gallery_paths`` describe the evaluation. Refused: any test query among the
    tuned-on images; a split drawn with another seed or size than the one held out when tuning, or
    holding other queries; a gallery that lacks some of the tuned-on images (another gallery). The
    split is compared first (its message names both splits), then the overlap.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: tuned_on must be a JSON object")
    gallery = record.get("gallery")
    if not isinstance(gallery, Mapping):
        raise ValueError(f"{where}: tuned_on.gallery must be a JSON object")
    held_out = record.get("test_split")
    if held_out is not None:
        if not isinstance(held_out, Mapping):
            raise ValueError(f"{where}: tuned_on.test_split must be a JSON object")
        _check_split_record(held_out, where)
        recorded = {key: held_out[key] for key in _SPLIT_KEYS if key in held_out}
        if held_out.get("seed") != seed or recorded != {
            key: split_option[key] for key in _SPLIT_KEYS if key in split_option
        }:
            raise ValueError(
                f"{where} was tuned with the test split {_split_words(held_out.get('seed'), recorded)}, "
                f"but this evaluation draws {_split_words(seed, split_option)}; give the same split"
            )
        if held_out.get("digest") != path_digest(test_paths):
            raise ValueError(
                f"{where} held out other test queries than this evaluation draws with the same split "
                "(another gallery, or images were added or removed since tuning); tune again"
            )
    tuned = _check_gallery_record(gallery, where)
    leaked = sum(1 for path in test_paths if _hash(path) in tuned)
    if leaked:
        raise ValueError(
            f"{where} was tuned on {leaked} of these {len(test_paths)} test queries (a leak: they would be "
            "scored with settings chosen on them); tune again with the same --seed and --n-queries / "
            "--query-fraction as this evaluation"
        )
    present = {_hash(path) for path in gallery_paths}
    missing = len(tuned - present)
    if missing:
        raise ValueError(
            f"{where} was tuned on another gallery: {missing} of its {len(tuned)} images are not in this "
            "gallery; tune on this gallery"
        )
