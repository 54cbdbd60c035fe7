"""A signal that lands while a framework writes a checkpoint waits until the file is
written: cut short, the checkpoint the user had would be left half overwritten (a Keras
`ModelCheckpoint` saving at the epoch's end, right after the doctor's diagnosis)."""

import os
import signal
import sys

import pytest

from gradient_doctor.cli.interrupts import RunInterrupts, Terminated, writes_a_file


def _function(path: str, name: str, body: str):
    """A function whose code says it lives in `path` (as a framework's would)."""
    namespace: dict = {}
    exec(compile(f"def {name}(callback):\n    {body}\n", path, "exec"), namespace)
    return namespace[name]


def test_the_frameworks_file_writers_are_recognised_by_where_they_live():
    torch_save = _function(os.path.join("site", "torch", "serialization.py"), "save", "pass")
    keras_save = _function(
        os.path.join("site", "keras", "src", "saving", "saving_lib.py"), "save_model", "pass"
    )
    torch_load = _function(os.path.join("site", "torch", "serialization.py"), "load", "pass")
    assert writes_a_file(torch_save.__code__) and writes_a_file(keras_save.__code__)
    assert not writes_a_file(torch_load.__code__)
    assert not writes_a_file(
        test_the_frameworks_file_writers_are_recognised_by_where_they_live.__code__
    )


def test_a_sigterm_inside_a_save_is_held_and_raised_once_it_is_written(capsys):
    path = os.path.join("site", "torch", "serialization.py")
    save = _function(path, "save", "callback()")
    landed: list = []

    def script():
        def signal_arrives():
            interrupts._handle(signal.SIGTERM, sys._getframe())  # as the OS would deliver it
            landed.append("held")

        save(signal_arrives)  # the signal lands inside torch.save: held until it returns
        landed.append("written")
        interrupts._retrying = True  # the held signal, handed to the main thread again
        interrupts._handle(signal.SIGTERM, sys._getframe())

    interrupts = RunInterrupts(script.__code__)
    try:
        with pytest.raises(Terminated):
            script()
    finally:
        interrupts._stop_retrying()
    assert landed == ["held", "written"]
    assert "while your script writes a file (a checkpoint)" in capsys.readouterr().err
