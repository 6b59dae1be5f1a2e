"""Interrupt stress test: random SIGINT / SIGTERM / SIGKILL during the commands that write files.

For each command (``build`` with the exact, HNSW and IVF-PQ indexes, ``add``, ``sync``, ``tune``)
and each round, the command runs on the digits gallery (scikit-learn's scans,
:func:`galleria.datasets.digits.digits_folder`; 40 per label by default) with the ``pixel:8:gray``
embedder, and receives one signal, chosen at random, after a random delay within the length of an
uninterrupted run. Then:

* every file the command writes that exists is loaded: the store (``load_from_disk``), the build
  checkpoint ``STORE.partial``, the manifest ``STORE.files.json``, ``tune``'s settings file; a file
  that does not load counts as **unloadable**;
* a store must hold the gallery as it was before the command or as the command leaves it, nothing
  in between (else **inconsistent**);
* the command is run again to completion (``build --resume`` when a checkpoint is there, else the
  same command): a failure, or a final store that does not hold the whole gallery, counts as a
  **failed resume** (``tune`` keeps no checkpoint; it is run again from the start);
* a SIGINT must end in exit code 130 (0 when the command had finished) with one line and no
  traceback (else **traceback**); exit -2 (killed by SIGINT while the interpreter was starting up
  or shutting down, when Python has no handler installed) is counted apart.

Usage::

    PYTHONPATH=src python benchmarks/experiments/bench_interrupts.py --rounds 10
    PYTHONPATH=src python benchmarks/experiments/bench_interrupts.py --rounds 50 --commands build-hnsw add

``--per-label 40`` (the default) takes the first 40 digits of each label (400 images), so that a
round takes seconds; ``--per-label 0`` uses all 1,797. Prints one line per round and a table of
counts per command; ``--json FILE`` writes them too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EMBEDDER = "pixel:8:gray"
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
COMMANDS = ("build-exact", "build-hnsw", "build-ivfpq", "add", "sync", "tune")


def _galleria(args: list[str], delay: float | None, sig: int | None) -> tuple[int, str, float]:
    """Run ``galleria ARGS``; send ``sig`` after ``delay`` seconds (if still running). (code, stderr, s)."""
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "galleria", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    if delay is not None and sig is not None:
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(sig)
    _, err = process.communicate(timeout=900)
    return process.returncode, err, time.monotonic() - started


def _store_count(path: Path) -> int:
    from galleria import InMemoryImageEmbeddingStore

    return len(InMemoryImageEmbeddingStore.load_from_disk(path))


class Case:
    """One command's setup, run, check and re-run, in a scratch folder."""

    def __init__(self, name: str, digits: Path, work: Path) -> None:
        self.name, self.digits, self.work = name, digits, work
        self.store = work / "s.safetensors"
        self.half = work / "half"  # the gallery sync and add start from
        self.full = len(list(digits.rglob("*.png")))

    def labels(self) -> list[str]:
        return sorted(entry.name for entry in self.digits.iterdir() if entry.is_dir())

    def args(self, resume: bool = False) -> list[str]:
        if self.name.startswith("build-"):
            index = self.name.split("-", 1)[1]
            args = ["build", str(self.digits), "--out", str(self.store), "--embedder", EMBEDDER]
            args += ["--index", index, "--batch-size", "8", "--checkpoint-every", "0"]
            if index == "ivfpq":  # a small gallery: few lists, 6-bit codes (trains on the first chunk)
                args += ["--index-param", "lists=4", "--index-param", "bits=4"]
            return [*args, "--resume"] if resume else args
        if self.name == "add":
            return ["add", str(self.store), str(self.work / "other")]
        if self.name == "sync":
            return ["sync", str(self.store), str(self.half)]
        tune = ["tune", str(self.base), "--out", str(self.work / "t.json"), "--trials", "8"]
        return [*tune, "--methods", "aqe", "k-reciprocal", "--splits", "1"]

    def prepare(self) -> None:
        """A fresh scratch state: no store (build), a store of half the gallery (add, sync, tune)."""
        for path in self.work.iterdir():
            if path.name not in ("base.safetensors", "base.safetensors.files.json", "half", "other"):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        if self.name.startswith("build-"):
            return
        self.base = self.work / "base.safetensors"
        if not self.base.exists():
            for label in self.labels():
                (self.half / label).mkdir(parents=True, exist_ok=True)
                for name in sorted(os.listdir(self.digits / label))[::2]:
                    shutil.copy(self.digits / label / name, self.half / label / name)
            code, err, _ = _galleria(
                ["build", str(self.half), "--out", str(self.base), "--embedder", EMBEDDER], None, None
            )
            assert code == 0, err
        shutil.copy(self.base, self.store)
        shutil.copy(str(self.base) + ".files.json", str(self.store) + ".files.json")
        if self.name in ("sync", "add"):  # the folder gains the other half / add gets a folder of it
            target = self.half if self.name == "sync" else self.work / "other"
            for label in self.labels():
                (target / label).mkdir(parents=True, exist_ok=True)
                for name in sorted(os.listdir(self.digits / label))[1::2]:
                    shutil.copy(self.digits / label / name, target / label / name)

    def expected(self) -> tuple[set[int], int]:
        """(store sizes allowed right after an interrupt, the size once finished)."""
        start = 0 if self.name.startswith("build-") else _store_count(self.base)
        if self.name == "tune":
            return {start}, start
        return ({start, self.full} if start else {self.full}), self.full

    def check_files(self) -> tuple[list[str], bool]:
        """(unloadable files, store inconsistent)."""
        from galleria.cli._edits import parse_manifest
        from galleria.tune.settings import read_settings_file

        bad: list[str] = []
        inconsistent = False
        allowed, _ = self.expected()
        for path in (self.store, Path(str(self.store) + ".partial")):
            if path.exists():
                try:
                    count = _store_count(path)
                except (OSError, ValueError, RuntimeError) as error:
                    bad.append(f"{path.name}: {error}")
                    continue
                if path == self.store and count not in allowed:
                    inconsistent = True
        manifest = Path(str(self.store) + ".files.json")
        if manifest.exists() and self.store.exists():
            try:
                parse_manifest(str(self.store))
            except (OSError, ValueError) as error:
                bad.append(f"{manifest.name}: {error}")
        settings = self.work / "t.json"
        if settings.exists():
            try:
                read_settings_file(str(settings))
            except (OSError, ValueError) as error:
                bad.append(f"t.json: {error}")
        return bad, inconsistent

    def rerun(self) -> str | None:
        """Finish the job; None when it worked, else what failed."""
        if self.name.startswith("build-") and self.store.exists():
            return None if _store_count(self.store) == self.full else "finished store is not whole"
        resume = self.name.startswith("build-") and Path(str(self.store) + ".partial").exists()
        code, err, _ = _galleria(self.args(resume=resume), None, None)
        if code != 0:
            return f"exit {code}: {err.strip().splitlines()[-1] if err.strip() else ''}"
        _, final = self.expected()
        if self.name == "tune":
            return None if (self.work / "t.json").exists() else "no settings file"
        count = _store_count(self.store)
        return None if count == final else f"store holds {count}, not {final}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="signals per command (default: 10)")
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--per-label", type=int, default=40, help="digits per label (default: 40, 400 images; 0: all 1,797)"
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="write the counts as JSON")
    options = parser.parse_args()
    from galleria.datasets.digits import digits_folder

    rng = random.Random(options.seed)
    scratch = Path(tempfile.mkdtemp(prefix="galleria-interrupts-"))
    digits = digits_folder(scratch / "cache")
    if options.per_label:  # a smaller gallery of the same digits: more rounds in the same time
        subset = scratch / "digits"
        for label in sorted(entry.name for entry in digits.iterdir() if entry.is_dir()):
            (subset / label).mkdir(parents=True)
            for name in sorted(os.listdir(digits / label))[: options.per_label]:
                shutil.copy(digits / label / name, subset / label / name)
        digits = subset
    totals: dict[str, dict[str, Any]] = {}
    # Signals are sent after the interpreter's start-up (as long as `galleria --version` takes),
    # so that they land in the command's own work.
    startup = min(_galleria(["--version"], None, None)[2] for _ in range(3))
    print(f"start-up: {startup:.2f} s", flush=True)
    for name in options.commands:
        work = scratch / name
        work.mkdir()
        case = Case(name, digits, work)
        case.prepare()
        code, err, length = _galleria(case.args(), None, None)  # one uninterrupted run: its length
        assert code == 0, err
        counts = {"rounds": 0, "unloadable": 0, "inconsistent": 0, "failed_resumes": 0, "tracebacks": 0}
        counts["killed_outside_python"] = 0
        counts["uninterrupted_seconds"] = round(length, 2)
        for round_number in range(options.rounds):
            case.prepare()
            sig_name = rng.choice(sorted(SIGNALS))
            delay = startup + rng.uniform(0.0, 1.0) * max(0.0, length - startup)
            code, err, _ = _galleria(case.args(), delay, SIGNALS[sig_name])
            bad, inconsistent = case.check_files()
            # A SIGINT ends in 130 (or 0 when it came too late); -2 means it arrived while Python had
            # no handler yet or any more (interpreter start-up or teardown): no traceback, no file.
            traceback = "Traceback" in err or (sig_name == "SIGINT" and code not in (0, 130, -2))
            counts["killed_outside_python"] += code == -signal.SIGINT
            failure = case.rerun() if not bad else "skipped (unloadable file)"
            counts["rounds"] += 1
            counts["unloadable"] += bool(bad)
            counts["inconsistent"] += inconsistent
            counts["failed_resumes"] += failure is not None
            counts["tracebacks"] += traceback
            print(
                f"{name:12} {round_number:3} {sig_name:7} at {delay:5.2f}s exit {code:4}  "
                f"{'UNLOADABLE ' + '; '.join(bad) if bad else 'files ok'}"
                f"{'  INCONSISTENT' if inconsistent else ''}{'  TRACEBACK' if traceback else ''}  "
                f"re-run: {failure or 'ok'}",
                flush=True,
            )
            if traceback:
                print("    " + "\n    ".join(err.strip().splitlines()[-4:]), flush=True)
        totals[name] = counts
    print()
    print(f"{'command':12} rounds unloadable inconsistent failed_resumes tracebacks  (uninterrupted run)")
    for name, counts in totals.items():
        print(
            f"{name:12} {counts['rounds']:6} {counts['unloadable']:10} {counts['inconsistent']:12} "
            f"{counts['failed_resumes']:14} {counts['tracebacks']:10}  ({counts['uninterrupted_seconds']} s)"
        )
    if options.json:
        Path(options.json).write_text(json.dumps(totals, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)
    failed = sum(
        c["unloadable"] + c["inconsistent"] + c["failed_resumes"] + c["tracebacks"] for c in totals.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
