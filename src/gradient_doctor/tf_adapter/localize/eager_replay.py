"""Find a replayable step for an update made in plain eager code (no step wrapper).

Used when the step has no trace of its own (`eager_trace`): the user's function that
makes the update, called again with the arguments it had.
"""

from __future__ import annotations

import ast
import gc
import inspect
import textwrap
from types import FrameType

from gradient_doctor.core.source_frames import user_frame
from gradient_doctor.tf_adapter.localize.step_context import StepCall


def enclosing_step(frame: FrameType | None = None) -> tuple[StepCall | None, list]:
    """The user's function that is making the current update, with its arguments.

    Returns (call, named_arguments); call is None when the update is made at
    module level (a loop body in the script itself cannot be run again).
    """
    frame = user_frame(frame)
    if frame is None or frame.f_code.co_name == "<module>":
        return None, []
    function = _function_of(frame)
    if function is None or _update_is_inside_a_loop(function, frame.f_lineno):
        return None, []  # the function is the training loop, not one step
    info = inspect.getargvalues(frame)
    names = list(info.args)
    values = [info.locals[n] for n in names]
    if names and names[0] in ("self", "cls") and inspect.ismethod(function):
        names, values = names[1:], values[1:]
    args = tuple(values) + tuple(info.locals.get(info.varargs, ()) if info.varargs else ())
    kwargs = dict(info.locals.get(info.keywords, {})) if info.keywords else {}
    named = list(zip(names, values))
    return StepCall(function, args, kwargs), named


def _update_is_inside_a_loop(function, lineno: int) -> bool:
    """True when line `lineno` of `function` sits in a `for`/`while` loop of its own body."""
    try:
        lines, first = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return True  # cannot tell: running it again could run the whole loop
    target = lineno - first + 1
    return any(
        isinstance(node, ast.For | ast.AsyncFor | ast.While)
        and node.lineno <= target <= (node.end_lineno or node.lineno)
        for node in ast.walk(tree)
    )


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
