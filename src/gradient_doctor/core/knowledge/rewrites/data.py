"""Rewrite the user's `fit(...)` line so the model trains on standardised features or targets.

`model.fit(features, prices, ...)` becomes
`model.fit((features - features.mean(axis=0, dtype="float64"))
/ (features.std(axis=0, dtype="float64") + 1e-07), prices, ...)`: each feature centred and
scaled by the training data's own statistics, and the validation features
(`validation_data=(x_val, y_val)`) by the same ones. The statistics are taken in float64:
NumPy sums a float32 array in float32, so the mean of readings near 1e38 (the data most in
need of this fix) or the squares of readings past 1e19 would overflow to inf; Keras casts
the float64 result back to its float type. The targets (`y`) are standardised the same
way, for a regression whose targets are far from unit scale. No name of the user's is
reassigned; the trial standardises the batches with the same expression.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.source.syntax_edit import (
    argument,
    combined,
    fit_call,
    literal,
    parse,
    segment,
)

# Added to each feature's standard deviation (a constant feature divides by it alone).
EPSILON = 1e-7
# The type the statistics are taken in (see the module's docstring).
STATISTICS_DTYPE = "float64"


# What each part of `fit`'s data is: its position and keyword in the call, and its
# position in `validation_data=(x_val, y_val)`.
PARTS = {"x": 0, "y": 1}


def standardise_fit_input(source: SourceLine, lines: Sequence[str], part: str = "x") -> Edit | None:
    """An edit of the `fit` call on `source` standardising its `x` (or, with `part="y"`,
    its targets), and the same part of `validation_data`. An autoencoder's
    `fit(x, x)` has its targets standardised with its inputs: they are the same data,
    and a model fed standardised inputs and asked for the raw ones still learns the
    raw scale.

    Returns None when the line has no `fit` call whose `part` is a plain name or
    attribute (an expression or a dataset cannot be standardised by a rewrite).
    """
    position = PARTS[part]
    tree, text = parse(lines)
    if tree is None:
        return None
    fit = fit_call(tree, source)
    value = argument(fit, position, part) if fit is not None else None
    if not isinstance(value, ast.Name | ast.Attribute):
        return None
    name = segment(text, value)
    wide = f'axis=0, dtype="{STATISTICS_DTYPE}"'
    mean, std = f"{name}.mean({wide})", f"({name}.std({wide}) + {literal(EPSILON)})"
    changes = [(value, f"({name} - {mean}) / {std}")]
    targets = argument(fit, PARTS["y"], "y") if part == "x" else None
    if targets is not None and segment(text, targets) == name:  # fit(x, x)
        changes.append((targets, f"({name} - {mean}) / {std}"))
    validation = argument(fit, None, "validation_data")
    if isinstance(validation, ast.Tuple) and len(validation.elts) > position:
        held_out = validation.elts[position]
        held_out_name = segment(text, held_out)
        changes.append((held_out, f"({held_out_name} - {mean}) / {std}"))
        if targets is not None and segment(text, targets) == name and len(validation.elts) > 1:
            if segment(text, validation.elts[1]) == held_out_name:  # (x_val, x_val)
                changes.append((validation.elts[1], f"({held_out_name} - {mean}) / {std}"))
    return combined(text, fit, changes, source.file)


def scale_fit_input(source: SourceLine, lines: Sequence[str]) -> Edit | None:
    """An edit of the `fit` call on `source` dividing its `x` (and the validation `x`) by
    the training features' largest magnitude, `x / abs(x).max()`.

    For a `fit(x)` given no targets: the model's own step may read its inputs as its
    targets too (a variational autoencoder's reconstruction of pixels), and a loss such
    as a binary cross-entropy needs them inside [0, 1]; standardised, they leave it and
    the loss has no floor. Divided by their largest magnitude, data that was in
    [0, 255] is in [0, 1], signed data in [-1, 1].

    Returns None when the line has no `fit` call whose `x` is a plain name or attribute.
    """
    tree, text = parse(lines)
    if tree is None:
        return None
    fit = fit_call(tree, source)
    value = argument(fit, PARTS["x"], "x") if fit is not None else None
    if not isinstance(value, ast.Name | ast.Attribute):
        return None
    name = segment(text, value)
    largest = f"abs({name}).max()"
    changes = [(value, f"{name} / {largest}")]
    validation = argument(fit, None, "validation_data")
    if isinstance(validation, ast.Tuple) and validation.elts:
        held_out = validation.elts[0]
        changes.append((held_out, f"{segment(text, held_out)} / {largest}"))
    return combined(text, fit, changes, source.file)
