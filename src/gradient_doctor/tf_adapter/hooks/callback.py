"""`Doctor`: the Keras callback that watches `model.fit`."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import keras

from gradient_doctor.core.attribute_patches import AttributePatches
from gradient_doctor.core.pipeline import DEFAULT_TRIAL_STEPS
from gradient_doctor.core.report import Report
from gradient_doctor.core.source_frames import user_line
from gradient_doctor.tf_adapter._tf_internals import flat_layers
from gradient_doctor.tf_adapter.hooks.loss_inputs import LossInputs
from gradient_doctor.tf_adapter.hooks.model_hooks import ModelHook, attach
from gradient_doctor.tf_adapter.watcher import make_watcher


class Doctor(keras.callbacks.Callback):
    """Watch `model.fit` for non-finite losses and gradients, and diagnose them.

    At the first step whose loss or gradients are not finite the update is
    skipped (the weights stay at the last good step), the step is replayed op by
    op, and the diagnosis is printed and kept in `doctor.report()`.

    Args:
        stop_on_problem: bool. Stop training at the first problem. Pass False to
            keep training and only record (bad updates are still skipped).
            Defaults to True.
        verbose: bool. Print each diagnosis when it is made. Defaults to True.
        watcher: the `Watcher` of a whole run to report to (`gradient-doctor run`
            passes its own); None makes one for this callback.
        trial_steps: int. After a non-finite step, try each proposed fix from
            the last good state for this many steps; 0 turns the trials off.
            Defaults to 200.
        layer_stats: bool. Measure per-layer gradient and weight norms,
            activations, dead and saturated units every 10 steps inside the step
            (full monitoring); False keeps only the global checks. Defaults to True.

    Example:
        >>> doctor = gradient_doctor.Doctor()
        >>> model.fit(x, y, callbacks=[doctor])
        >>> doctor.report().status
        'healthy'
    """

    def __init__(
        self,
        stop_on_problem: bool = True,
        verbose: bool = True,
        watcher=None,
        trial_steps: int = DEFAULT_TRIAL_STEPS,
        layer_stats: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(stop_on_problem, bool):
            raise TypeError(
                f"`stop_on_problem` must be a bool. Received: stop_on_problem={stop_on_problem!r}"
            )
        # Given a session's watcher (`gradient-doctor run`), the hooks stay on the model
        # between fits, so a script that calls fit once per epoch traces its step once.
        self._persistent = watcher is not None
        self.watcher = watcher or make_watcher(stop_on_problem, verbose, trial_steps, layer_stats)
        self._hook: ModelHook | None = None
        self._variables_checked = False
        # The cross-entropies watched for a layer's raw output while `fit` traces its
        # step (`gradient-doctor run` watches them for the whole script itself).
        self._loss_checks: LossInputs | None = None

    def adopt(self, watcher) -> None:
        """Report to `watcher` (a whole run's) instead of this callback's own."""
        self.watcher = watcher
        self._persistent = True

    def on_train_begin(self, logs=None) -> None:
        # A model without `Input` (a subclassed one, layers made in `build`) creates its
        # variables when fit first traces its step, after this: watch it from that step.
        self._variables_checked = False
        if _is_built(self.model) and not self._check_something_trains():
            return
        if self._hook is None or self._hook.model is not self.model:
            self._hook = attach(self.model, self.watcher)
            if not self._persistent:
                model = self.model
                seen = self.watcher.session.loss_input_seen
                self._loss_checks = LossInputs(seen, lambda: flat_layers(model))
                self._hook.during_step = self._checking_loss_inputs

    @contextlib.contextmanager
    def _checking_loss_inputs(self) -> Iterator[None]:
        """The cross-entropies watched while the model's step is traced (or runs
        eagerly), put back when it returns or raises: a `fit` that raises never calls
        `on_train_end`, and must leave Keras's losses as they were."""
        patches = AttributePatches()
        patches.replace_all(self._loss_checks.patches())
        try:
            yield
        finally:
            patches.restore()

    def _check_something_trains(self) -> bool:
        """False, with a warning, when the built model has no trainable variables."""
        self._variables_checked = True
        if self.model.trainable_weights:
            return True
        if self.watcher.model_trains_nothing(self.model, user_line()):
            return False  # the weights are there, all frozen: a problem, reported
        warnings.warn(
            "gradient-doctor: the model has no trainable variables, so there are no "
            "gradients to watch. Check `layer.trainable` and that the model was built.",
            stacklevel=3,
        )
        return False

    def on_train_batch_begin(self, batch, logs=None) -> None:
        self._first_batch = batch

    def on_train_batch_end(self, batch, logs=None) -> None:
        if self._hook is None:
            return
        if not self._variables_checked:  # built by the first step
            self._check_something_trains()
        # With steps_per_execution > 1, one call ran the batches from the one
        # given to on_train_batch_begin to this one.
        steps = max(batch - getattr(self, "_first_batch", batch) + 1, 1)
        finding = self._hook.after_steps(steps)
        if finding is not None and self.watcher.stop_on_problem:
            self.model.stop_training = True

    def on_train_end(self, logs=None) -> None:
        if self._hook is not None and not self._persistent:
            # The end of this callback's run: an unread latch, silent failures (a run of
            # its own session ends where the session does).
            self.watcher.finish()
            self._hook.detach()
            self._hook = None

    def report(self, script: str | None = None) -> Report:
        """What the doctor found so far."""
        return self.watcher.report(script)


def _is_built(model) -> bool:
    """True when the model and every layer in it have made their variables."""
    return all(getattr(layer, "built", True) for layer in flat_layers(model))
