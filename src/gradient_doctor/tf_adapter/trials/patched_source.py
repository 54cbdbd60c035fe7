"""Run the user's functions from a patched copy of their file while a fix is trialed in TensorFlow.

The copy and the swap of the functions' code are the core's (`core/patched_source.py`);
this adds TensorFlow's watch of whether the patch was reached. AutoGraph reads a
function's source from the file its code names, so a step traced again as a
`tf.function` is converted from the patched copy too, and runs converted code: the
patch counts as reached when an op is made from the patched copy's lines.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from gradient_doctor.core import patched_source as core_patched_source
from gradient_doctor.core.findings import Edit
from gradient_doctor.core.patched_source import NotPatchable, PatchedSource
from gradient_doctor.tf_adapter._tf_internals import op_callbacks

__all__ = ["NotPatchable", "PatchedSource", "patched_functions"]


@contextmanager
def patched_functions(edits: Sequence[Edit], root: str = ".") -> Iterator[PatchedSource]:
    """While the block runs, the functions that `edits` touch run the patched source,
    and `met` is set once an op is made by it.

    Raises:
        NotPatchable: see `core.patched_source.patched_functions`.
        PatchError: when an edit does not fit its file.
    """
    with core_patched_source.patched_functions(edits, root) as placed, _watch_met(placed):
        yield placed


def _frames(frame) -> Iterator[types.FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


@contextmanager
def _watch_met(placed: PatchedSource) -> Iterator[None]:
    """Set `placed.met` when an op is made while a patched function runs."""
    copies = frozenset(placed.scratch_files.values())

    def callback(op_type, inputs, attrs, outputs, op_name=None, graph=None):
        if placed.met:
            return None
        if graph is not None and outputs:
            # AutoGraph runs converted code from its own files; the op's traceback
            # maps those frames back to the file the source was read from.
            filenames = (frame.filename for frame in outputs[0].op.traceback)
        else:
            filenames = (frame.f_code.co_filename for frame in _frames(sys._getframe(1)))
        placed.met = any(name in copies for name in filenames)
        return None

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)
