"""The package surface: the fixed public names and the command list."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import galleria
from galleria.cli import COMMANDS, build_parser

FIXED_NAMES = [
    "recall_at_k",
    "InMemoryImageEmbeddingStore",
    "Candidate",
    "ExternalSearchIndex",
    "KReciprocalReranker",
    "ClipEmbedder",
    "PixelEmbedder",
    "Searcher",
    "RetrievalConfig",
]


def test_the_one_path_is_exported_as_the_same_objects() -> None:
    from galleria.retrieval import RetrievalConfig, Searcher

    assert galleria.Searcher is Searcher
    assert galleria.RetrievalConfig is RetrievalConfig


@pytest.mark.parametrize("name", sorted(set(galleria.__all__) - {"__version__"}))
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(galleria, name)
    assert value is not None
    if isinstance(value, types.ModuleType):  # galleria.tune: the package once imported, callable as tune()
        assert callable(value) and value.__name__ == f"galleria.{name}"
        return
    assert getattr(value, "__name__", name) == name


def test_fixed_public_names_are_exported() -> None:
    assert set(FIXED_NAMES) <= set(galleria.__all__)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = galleria.no_such_name  # type: ignore[attr-defined]


def test_help_lists_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "galleria", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    for command in ("demo", "build", "search", "evaluate", "evaluate-scores"):
        assert command in COMMANDS
        assert command in result.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as stop:
        parser.parse_args([command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"galleria {command}" in out


def test_closed_output_pipe_is_not_an_error(tmp_path: Path) -> None:
    # `galleria ... | head -1`: the reader is gone before the command writes its output.
    np.save(tmp_path / "s.npy", np.eye(4, dtype=np.float32))
    np.save(tmp_path / "g.npy", np.arange(4))
    command = [sys.executable, "-m", "galleria", "evaluate-scores", "--json"]
    command += ["--scores", str(tmp_path / "s.npy"), "--ground-truth", str(tmp_path / "g.npy")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0, stderr
    assert stderr == ""
