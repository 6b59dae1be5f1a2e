"""Run the attack corpus of ``tests/_support/attack_corpus.py`` at a larger scale, one process per row,
and print tries / clean / bad per row (a row whose process dies counts every untried case as bad).

    python tests/security/stress_attack_corpus.py --scale 10

Clean: refused with a ValueError/OSError naming the file, or loaded and behaving (searches return
only rows the store holds, once each, with finite scores). Bad: anything else (another exception,
a message without the file's name, a wrong result, a hang, a crash).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1] / "tests"


def _child(row: str, scale: int) -> None:
    sys.path.insert(0, str(TESTS))
    from _support.attack_corpus import run_row

    with tempfile.TemporaryDirectory() as folder:
        tally = run_row(row, Path(folder), scale)
    print(
        json.dumps({"tries": tally.tries, "clean": tally.clean, "bad": tally.bad, "examples": tally.examples})
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--row", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row is not None:
        _child(args.row, args.scale)
        return
    import faiss

    sys.path.insert(0, str(TESTS))
    from _support.attack_corpus import ROWS

    print(f"faiss {faiss.__version__}, scale {args.scale}, load {os.getloadavg()[0]:.2f}")
    print(f"| {'row':<66} | tries | clean | bad |")
    print(f"|{'-' * 68}|------:|------:|----:|")
    totals = [0, 0, 0]
    for row in ROWS:
        done = subprocess.run(
            [sys.executable, __file__, "--scale", str(args.scale), "--row", row],
            capture_output=True,
            text=True,
            env={**os.environ, "TQDM_DISABLE": "1"},
        )
        if done.returncode == 0:
            result = json.loads(done.stdout.strip().splitlines()[-1])
        else:  # the process died (a crash in native code): nothing it tried counts as clean
            result = {
                "tries": 1,
                "clean": 0,
                "bad": 1,
                "examples": [f"exit {done.returncode}: {done.stderr[-300:]}"],
            }
        for position, key in enumerate(("tries", "clean", "bad")):
            totals[position] += result[key]
        print(f"| {row:<66} | {result['tries']:>5} | {result['clean']:>5} | {result['bad']:>3} |", flush=True)
        for example in result["examples"]:
            print(f"    bad: {example}", file=sys.stderr)
    print(f"| {'total':<66} | {totals[0]:>5} | {totals[1]:>5} | {totals[2]:>3} |")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
