"""Ctrl-C during a study: raised inside a trial's measurement, recorded (and the study stopped)
anywhere else — never inside optuna's bookkeeping."""

from __future__ import annotations

import os
import signal

import pytest

from galleria.tune._stop import stopping_on_interrupt


class _Study:
    def __init__(self) -> None:
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_an_interrupt_between_trials_is_recorded_and_stops_the_study() -> None:
    study, interrupted = _Study(), []
    before = signal.getsignal(signal.SIGINT)
    with stopping_on_interrupt(study, [False], interrupted):
        os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: no KeyboardInterrupt here
        for _ in range(1000):
            pass
    assert study.stopped == 1 and len(interrupted) == 1
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupt_while_measuring_ends_the_trial_at_once() -> None:
    study, interrupted = _Study(), []
    with pytest.raises(KeyboardInterrupt), stopping_on_interrupt(study, [True], interrupted):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    assert study.stopped == 0 and interrupted == []
