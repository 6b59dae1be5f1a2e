"""``galleria duplicates``: the groups of exact and near-duplicate images of a store."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._parse import parse_float, parse_int
from galleria.cli._store_options import add_load_options, load_store

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria duplicates photos.safetensors                       # the threshold calibrated on the store
  galleria duplicates photos.safetensors --threshold 0.05 --keep oldest --csv > dups.csv
  galleria duplicates photos.safetensors --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria duplicates``."""
    from galleria.curation.keep import DEFAULT_KEEP, KEEP_RULES
    from galleria.curation.threshold import (
        CALIBRATION_FRACTION,
        CALIBRATION_QUANTILE,
        DEFAULT_K,
        THRESHOLD_BOUNDS,
    )

    bounds = ", ".join(f"{name} {low:g}–{high:g}" for name, (low, high) in THRESHOLD_BOUNDS.items())
    parser = add_command(
        subparsers,
        "duplicates",
        help="list groups of exact and near-duplicate images",
        description=(
            "Group the store's images that are the same pixels (a digest recorded at build) or the same "
            "picture resized, re-encoded, brightened or cropped by a few percent (within the threshold of "
            "the image kept, among its --k nearest neighbours, from the gallery's neighbour graph kept in "
            "STORE.graph). Each group is a star around the image --keep keeps: every member is a copy of "
            "it, never only of another member. Groups are listed largest first."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    parser.add_argument(
        "--threshold",
        default=None,
        metavar="T",
        help="largest distance of a near copy to the image kept, in [0, 2] (default: calibrated on the "
        f"store: {CALIBRATION_FRACTION:g} × the {CALIBRATION_QUANTILE:g} quantile of its neighbour "
        f"distances, held within the embedder's bounds: {bounds})",
    )
    parser.add_argument(
        "--k",
        default=str(DEFAULT_K),
        metavar="K",
        help="neighbours searched per image (default: %(default)s)",
    )
    parser.add_argument(
        "--keep",
        default=DEFAULT_KEEP,
        choices=KEEP_RULES,
        help="the image each group keeps: best (most pixels, from the image header, then most bytes, "
        "then oldest), first path, largest file, oldest file; a local file always before a URL "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="group every pair within the threshold without looking at the pictures (reads no image "
        "beyond its header; by default candidates within a wider radius and by picture fingerprint "
        "are checked on small copies of the pictures)",
    )
    add_load_options(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help='print {"groups": [{"paths", "kind", "keep", "kept_because", "distances"}, ...], '
        '"threshold", "threshold_basis", ...}',
    )
    output.add_argument("--csv", action="store_true", help="print group,kind,keep,distance,path rows")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Find the groups and print them."""
    from galleria.curation.dedup import duplicate_report
    from galleria.viewer.text import printable

    threshold = None if args.threshold is None else parse_float("--threshold", args.threshold, maximum=2.0)
    k = parse_int("--k", args.k)
    store = load_store(args, args.store)
    report = duplicate_report(
        store, threshold=threshold, k=k, keep=args.keep, store_file=args.store, check=args.check
    )
    groups = report.groups
    if args.json:
        print_json(
            {
                "groups": [group.to_dict() for group in groups],
                "store": args.store,
                "images": len(store),
                "threshold": report.threshold,
                "threshold_basis": report.basis,
                "k": k,
                "keep_rule": report.keep,
                "check": report.check,
                "notes": report.notes,
            }
        )
        return 0
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["group", "kind", "keep", "distance", "path"])
        for number, group in enumerate(groups, start=1):
            kind = "exact" if group.exact else "near"
            for path, distance in zip(group.paths, group.distances, strict=True):
                kept = path == group.keep
                writer.writerow(
                    [number, kind, "yes" if kept else "", "" if kept else f"{distance:.6f}", printable(path)]
                )
        return 0
    duplicated = sum(len(group.paths) for group in groups)
    print(f"{len(groups)} group(s) of duplicates holding {duplicated} of {len(store)} images")
    print(f"threshold {report.threshold:.4g} ({_basis_text(report.basis)}); keep: {report.keep}")
    if report.check is not None:
        check = report.check
        print(
            f"pictures checked: {check['pairs_checked']} candidate pair(s) within "
            f"{check['search_radius']:.4g}"
            + (
                f" or by fingerprint ({check['fingerprint_pairs']} pair(s))"
                if check.get("fingerprints")
                else ""
            )
            + f", the same picture at similarity ≥ {check['same_picture']:g}"
        )
    for note in report.notes:
        print(f"note: {note}")
    for number, group in enumerate(groups, start=1):
        kind = "exact" if group.exact else "near"
        print(f"\ngroup {number} ({len(group.paths)} images, {kind}); kept: {group.kept_because}")
        for path, distance in zip(group.paths, group.distances, strict=True):
            mark = "keep        " if path == group.keep else f"  d={distance:.4f}"
            print(f"  {mark}  {printable(path)}")
    return 0


def _basis_text(basis: dict[str, Any]) -> str:
    """How the threshold was chosen, in words."""
    if basis.get("source") != "calibrated":
        return "--threshold"
    level = basis.get("neighbour_quantile")
    if level is None:
        return f"too few images to calibrate: the floor {basis['floor']:g}"
    reading = (
        f"{basis['fraction']:g} × {level:.4g}, the {basis['quantile']:g} quantile of the neighbour distances"
    )
    if basis["rule"] == "floor":
        return f"{reading}, raised to the floor {basis['floor']:g}"
    if basis["rule"] == "cap":
        return f"{reading}, held at the cap {basis['cap']:g}"
    return f"calibrated: {reading}"
