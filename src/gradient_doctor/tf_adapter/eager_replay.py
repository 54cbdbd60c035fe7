"""Find a replayable step for an update made in plain eager code (no step wrapper)."""

from __future__ import annotations

import gc
import inspect
from types import FrameType

from gradient_doctor.tf_adapter.source_frames import user_frame
from gradient_doctor.tf_adapter.step_context import StepCall


def enclosing_step(frame: FrameType | None = None) -> tuple[StepCall | None, list]:
    """The user's function that is making the current update, with its arguments.

    Returns (call, named_arguments); call is None when the update is made at
    module level (a loop body in the script itself cannot be run again).
    """
    frame = user_frame(frame)
    if frame is None or frame.f_code.co_name == "<module>":
        return None, []
    function = _function_of(frame)
    if function is None:
        return None, []
    info = inspect.getargvalues(frame)
    names = list(info.args)
    values = [info.locals[n] for n in names]
    if names and names[0] in ("self", "cls") and inspect.ismethod(function):
        names, values = names[1:], values[1:]
    args = tuple(values) + tuple(info.locals.get(info.varargs, ()) if info.varargs else ())
    kwargs = dict(info.locals.get(info.keywords, {})) if info.keywords else {}
    named = list(zip(names, values))
    return StepCall(function, args, kwargs), named


def _function_of(frame: FrameType):
    code = frame.f_code
    owner = frame.f_locals.get("self")
    if owner is not None:
        method = getattr(owner, code.co_name, None)
        if getattr(getattr(method, "__func__", None), "__code__", None) is code:
            return method
    for referrer in gc.get_referrers(code):
        if inspect.isfunction(referrer) and referrer.__code__ is code:
            return referrer
    return None
