"""``galleria duplicates``: the groups of exact and near-duplicate images of a store."""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

from galleria.cli._common import add_command, print_json
from galleria.cli._options import add_load_options, load_store, parse_float, parse_int

__all__ = ["add_parser", "run"]

_EXAMPLES = """\
  galleria duplicates photos.safetensors                       # the embedder's default threshold
  galleria duplicates photos.safetensors --threshold 0.05 --keep largest --csv > dups.csv
  galleria duplicates photos.safetensors --json
"""


def add_parser(subparsers: Any) -> None:
    """Register ``galleria duplicates``."""
    from galleria.curation.dedup import DEFAULT_K, DEFAULT_THRESHOLDS, FALLBACK_THRESHOLD, KEEP_RULES

    defaults = ", ".join(f"{name} {value:g}" for name, value in DEFAULT_THRESHOLDS.items())
    parser = add_command(
        subparsers,
        "duplicates",
        help="list groups of exact and near-duplicate images",
        description=(
            "Group the store's images that are the same pixels (a digest recorded at build) or near copies "
            "(resized, recompressed, lightly cropped or colour-shifted: within --threshold of each other "
            "among their --k nearest neighbours, from the gallery's neighbor graph, kept in STORE.graph). "
            "Groups are connected components, largest first; each names the image --keep keeps."
        ),
        examples=_EXAMPLES,
    )
    parser.add_argument("store", metavar="STORE", help="store file written by `galleria build`")
    parser.add_argument(
        "--threshold",
        default=None,
        metavar="T",
        help=f"largest distance of a near copy, in [0, 2] (default: the embedder's: {defaults}; "
        f"other stores {FALLBACK_THRESHOLD:g})",
    )
    parser.add_argument(
        "--k",
        default=str(DEFAULT_K),
        metavar="K",
        help="neighbours searched per image (default: %(default)s)",
    )
    parser.add_argument(
        "--keep",
        default="first",
        choices=KEEP_RULES,
        help="the image kept in each group: first path, largest file, oldest file (default: %(default)s)",
    )
    add_load_options(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help='print {"groups": [[path, ...], ...], ...}')
    output.add_argument("--csv", action="store_true", help="print group,kind,keep,path rows")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Find the groups and print them."""
    from galleria.curation.dedup import duplicate_groups
    from galleria.viewer.text import printable

    threshold = None if args.threshold is None else parse_float("--threshold", args.threshold, maximum=2.0)
    k = parse_int("--k", args.k)
    store = load_store(args, args.store)
    groups = duplicate_groups(store, threshold=threshold, k=k, keep=args.keep, store_file=args.store)
    if args.json:
        print_json(
            {
                "groups": [list(group.paths) for group in groups],
                "kinds": ["exact" if group.exact else "near" for group in groups],
                "keep": [group.keep for group in groups],
                "store": args.store,
                "images": len(store),
                "threshold": threshold,
                "k": k,
            }
        )
        return 0
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["group", "kind", "keep", "path"])
        for number, group in enumerate(groups, start=1):
            kind = "exact" if group.exact else "near"
            for path in group.paths:
                writer.writerow([number, kind, "yes" if path == group.keep else "", printable(path)])
        return 0
    duplicated = sum(len(group.paths) for group in groups)
    print(f"{len(groups)} group(s) of duplicates holding {duplicated} of {len(store)} images")
    for number, group in enumerate(groups, start=1):
        kind = "exact" if group.exact else "near"
        print(f"\ngroup {number} ({len(group.paths)} images, {kind})")
        for path in group.paths:
            mark = "keep" if path == group.keep else "    "
            print(f"  {mark}  {printable(path)}")
    return 0
