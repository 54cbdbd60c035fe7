"""`watch()`: opt a custom training loop in to the doctor with one line."""

from __future__ import annotations

from collections.abc import Callable

from gradient_doctor.core.pipeline import DEFAULT_TRIAL_STEPS
from gradient_doctor.tf_adapter.hooks.custom_loop import WatchedStep
from gradient_doctor.tf_adapter.hooks.model_hooks import guard_optimizer
from gradient_doctor.tf_adapter.watcher import make_watcher


def watch(
    step: Callable | None = None,
    *,
    optimizer,
    stop_on_problem: bool = True,
    verbose: bool = True,
    trial_steps: int = DEFAULT_TRIAL_STEPS,
    layer_stats: bool = True,
):
    """Watch a custom training step (eager or `tf.function`) and its optimizer(s).

    The step's updates are skipped when its loss or gradients are not finite;
    the step is then replayed op by op and diagnosed.

    Args:
        step: the function that runs one training step (forward, `tape.gradient`,
            `optimizer.apply_gradients`). Omit it to use `watch` as a decorator.
        optimizer: a Keras optimizer, or a list of them (a GAN's two).
        stop_on_problem: bool. Raise `TrainingStopped` at the first problem;
            False records it and goes on. Defaults to True.
        verbose: bool. Print each diagnosis when it is made. Defaults to True.
        trial_steps: int. After a non-finite step of a `tf.function` step, try each
            proposed fix from the last good state for this many steps; 0 turns the
            trials off. Defaults to 200.
        layer_stats: bool. Measure per-layer statistics every 10 steps inside the
            step (full monitoring); False keeps only the global checks. Defaults to True.

    Returns:
        The watched step (call it like the original), or a decorator.

    Raises:
        TypeError: `optimizer` is not a Keras optimizer.

    Example:
        >>> train_step = gradient_doctor.watch(train_step, optimizer=optimizer)
        >>> for x, y in dataset:
        ...     train_step(x, y)
    """
    import keras

    optimizers = list(optimizer) if isinstance(optimizer, list | tuple) else [optimizer]
    for candidate in optimizers:
        if not isinstance(candidate, keras.optimizers.Optimizer):
            raise TypeError(
                "`optimizer` must be a Keras optimizer (or a list of them), the one that "
                f"applies this step's gradients. Received: optimizer={candidate!r}"
            )
    watcher = make_watcher(stop_on_problem, verbose, trial_steps, layer_stats)
    for candidate in optimizers:
        guard_optimizer(candidate, watcher)
    watcher.optimizer = optimizers[0]

    def wrap(function: Callable) -> WatchedStep:
        return WatchedStep(function, watcher)

    return wrap if step is None else wrap(step)
