"""The remedies users try first that cannot help, with the reason, for each kind of cause."""

from __future__ import annotations

from gradient_doctor.core.findings import NotFix


def forward_not_fixes(problem: str, weights_upstream: bool | None = None) -> tuple[NotFix, ...]:
    """Remedies that cannot remove a problem born in the forward pass.

    Args:
        problem: str, what happens in the forward pass, e.g. "the overflow in Exp".
        weights_upstream: False when the op's inputs come from the batch alone (no
            weight between, so the learning rate cannot even delay it).

    Returns:
        gradient_clipping, lower_learning_rate and larger_batch, each with its reason:
        facts when no weight lies upstream, expectations (for the trials to judge)
        when weights do, since earlier updates moved them there.
    """
    no_weights = weights_upstream is False
    return (
        NotFix(
            "gradient_clipping",
            f"Clipping acts on gradients; {problem} happens in the forward pass before any "
            "gradient exists, and no trainable weight lies between the batch and it, so no "
            "update reaches it."
            if no_weights
            else f"Clipping acts on gradients; {problem} happens in the forward pass before "
            "any gradient exists. It can only bound the updates that move the weights toward "
            "it: it is expected to delay it, not remove it.",
            structural=no_weights,
        ),
        NotFix(
            "lower_learning_rate",
            f"No trainable weight lies between the batch and {problem}: the learning rate "
            "cannot change it at all."
            if no_weights
            else f"A smaller learning rate only slows the drift of the weights that lead to "
            f"{problem}: it is expected to delay it, not remove it.",
            structural=no_weights,
        ),
        NotFix(
            "larger_batch",
            f"A larger batch averages the gradients but computes the forward pass the same "
            f"way: it is expected to delay {problem}, not remove it.",
            structural=False,
        ),
    )


def nan_gradient_not_fixes(cause: str, framework: str, kind: str = "NaN") -> tuple[NotFix, ...]:
    """Remedies that act on gradients after they are computed, so cannot undo a NaN or inf.

    Args:
        cause: str, where the value comes from, e.g. "the data".
        framework: the framework the user trains with ("tf" or "torch"), which names
            the clipping call.
        kind: str, the non-finite value the op wrote (`wording.nonfinite_kind`): "NaN",
            "inf", "-inf" or "non-finite value". Defaults to "NaN".

    Returns:
        gradient_clipping and lower_learning_rate, each with its reason.
    """
    clip = "torch.nn.utils.clip_grad_norm_" if framework == "torch" else "tf.clip_by_global_norm"
    value = kind if kind != "non-finite value" else "non-finite gradient"
    article = "an" if value[0] in "aeiou" else "a"
    if kind == "NaN":
        clipped = f"Clipping a NaN gives NaN, and {clip} of a NaN norm turns every gradient NaN."
    else:
        clipped = (
            f"{clip} of an infinite norm scales every gradient by 0: the finite ones vanish "
            "and the infinite ones turn NaN."
        )
    return (
        NotFix("gradient_clipping", f"The {value} comes from {cause}. {clipped}"),
        NotFix(
            "lower_learning_rate",
            f"The {value} comes from {cause}; the learning rate scales the gradient after it is "
            f"computed, and {article} {value} times a smaller rate is still {value}.",
        ),
    )


def missing_gradient_not_fixes(reason: str) -> tuple[NotFix, ...]:
    """The tape tricks users try on `None` gradients, none of which changes the path.

    Args:
        reason: str, a clause saying why the path is broken, e.g. "ArgMax at
            train.py:141 has no gradient" or "the loss does not depend on these
            variables".

    Returns:
        tape_watch, watch_accessed_variables, reorder_tapes, persistent_tape and
        use_model_fit, each with its reason.
    """
    return (
        NotFix(
            "tape_watch",
            f"tape.watch only adds tensors for the tape to record; {reason}, so watching "
            "more tensors changes nothing.",
        ),
        NotFix(
            "watch_accessed_variables",
            "The tape already watches the trainable variables read inside it; turning that "
            f"off and watching them by hand records the same ops, and {reason}.",
        ),
        NotFix(
            "reorder_tapes",
            "Nesting or reordering tapes changes which tape records what, not the ops on the "
            f"path: {reason}.",
        ),
        NotFix(
            "persistent_tape",
            "A persistent tape only lets you call `gradient` more than once; it records the "
            f"same ops, and {reason}.",
        ),
        NotFix(
            "use_model_fit",
            "model.fit's train_step runs the same forward pass under the same kind of tape: "
            f"{reason} there too.",
        ),
    )


def torch_missing_gradient_not_fixes(reason: str) -> tuple[NotFix, ...]:
    """What PyTorch users try on `.grad` that stays None, none of which changes the path.

    Args:
        reason: str, a clause saying why the path is broken, e.g. "ArgMax at
            train.py:41 has no gradient".

    Returns:
        requires_grad, retain_graph, zero_grad_to_zeros and detect_anomaly, each with
        its reason.
    """
    return (
        NotFix(
            "requires_grad",
            "`requires_grad_()` (or `torch.tensor(..., requires_grad=True)`) on a tensor past "
            f"the break makes it a new leaf: the gradient stops there; {reason}.",
        ),
        NotFix(
            "retain_graph",
            "`loss.backward(retain_graph=True)` keeps the same graph for another backward; "
            f"{reason} in it too.",
        ),
        NotFix(
            "zero_grad_to_zeros",
            "`optimizer.zero_grad(set_to_none=False)` leaves zeros where None was: the "
            f"parameters still never move, since {reason}.",
        ),
        NotFix(
            "detect_anomaly",
            "`torch.autograd.detect_anomaly()` names backward ops that return NaN; a path "
            f"with no backward op at all is invisible to it ({reason}).",
        ),
    )


def vanishing_not_fixes() -> tuple[NotFix, ...]:
    """Remedies for large gradients that do nothing for gradients that are too small.

    Returns:
        gradient_clipping and lower_learning_rate, each with its reason.
    """
    return (
        NotFix(
            "gradient_clipping",
            "Clipping only scales gradients down when they are too large; these are "
            "already too small to move the weights.",
        ),
        NotFix(
            "lower_learning_rate",
            "A smaller learning rate makes the already tiny updates of these layers smaller still.",
        ),
    )
