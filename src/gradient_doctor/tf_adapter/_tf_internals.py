"""Every private TensorFlow and Keras internal the doctor touches, in one place, with what
it is for.

Checked on TensorFlow 2.21 and Keras 3.15. `tests/tf_adapter/test_tf_internals.py` fails
on the first of them that a new version moved or renamed, so an upgrade breaks there,
loudly, and not deep inside a diagnosis. The doctor uses the public API wherever it can
do the job; what is here has no public equivalent. Modules are exported whole where the
doctor swaps one of their attributes for a while (and puts it back).

What each is for (and the modules that use it):

- `pywrap_tfe`: is a tape recording right now (eager ops to trace) (hooks/eager_trace).
- `record`: custom gradients reaching the tapes (hooks/eager_trace, localize/trace_replay).
- `op_callbacks`: every op run or built, with its inputs and outputs (hooks/eager_trace,
  localize/replay, dump/step_graph, trials/patched_source).
- `polymorphic_function`: every `tf.function` call of a script (hooks/run_patches).
- `tf_stack`: the user's line of a traced `tape.gradient` call (hooks/tape_hook).
- `ops`: the gradient registry; an op's id in its graph (localize/backward_marks,
  localize/missing_gradients, localize/replay).
- `context`, `execute`, `op_def_registry`: running a traced eager op again, with its
  gradient (localize/trace_replay).
- `resource_variable_ops`: the variable type whose reads and writes are watched
  (hooks/state_writes, localize/replay).
- `gen_resource_variable_ops`: a variable read inside a replayed graph (dump/step_session).
- `gen_random_ops`: the random ops whose draws a replay repeats (step/random_draws).
- `control_flow_util`: is an op inside a `tf.cond`/`tf.while_loop` branch
  (step/xla_branches).
- `ag_ctx`, `converter`, `autograph`: running a step function as AutoGraph would
  (localize/replica_steps, dump/step_graph).
- `StrategyBase`, `DistributedValues`: steps and variables under `tf.distribute`
  (localize/replica_steps, trials/fix_trials).
- `global_state`: Keras's name-scope stack (the layer an op runs in) (hooks/eager_trace,
  hooks/creation_sites).
- `KerasVariable`: the base class whose `assign` Keras variables share (hooks/state_writes).
- `BaseOptimizer`: where `apply` and `apply_gradients` are defined (hooks/run_patches,
  hooks/creation_sites, dump/step_graph).
- `keras_backend`: the scope Keras builds optimizer variables in (step/guard).
- `get_data_adapter`: fresh batches of a `fit`'s arrays, as `fit` makes them
  (trials/trial_data).
- `current_name_scope_path`: the Keras layer path an op is built under
  (localize/backward_marks).
- `learning_rate_variable`: an optimizer's learning-rate variable, swapped during a trial
  (trials/trial_plans).
- `trainable_variables_of`, `updated_variables`: the variables an optimizer was built for,
  and those an `apply` call updates (step/guard, hooks/run_patches, trials/fix_sites,
  trials/snapshots).
- `clipped_gradients`: gradients as an optimizer's own clipping leaves them, before its
  update (step/clipping).
- `gradient_registry`, `set_gradient_registry`: the op type -> gradient function table both
  backprops read (localize/backward_marks, localize/missing_gradients).
- `op_id`: the order an op was built in its graph (localize/missing_gradients).
- `tape_flags`: a tape's `persistent`, `watch_accessed_variables`, recording
  (hooks/eager_trace, localize/trace_replay).
- `flat_layers`: every layer of a model, nested ones too, as Keras tracks them
  (hooks/callback).
- `autograph_origin`: the user's line a frame of an AutoGraph-converted function runs
  (its `ag_source_map`): a traced `tf.function` method runs converted even eagerly
  (hooks/creation_sites).
- `iteration_counter`: the variable an optimizer's `apply` counts its updates in (its
  `iterations` is a quotient of it under gradient accumulation) (step/iteration_count).
- `keras_nn`: Keras's TensorFlow cross-entropies, where a loss that reads probabilities
  is handed its predictions (hooks/loss_inputs).
- `mapped_functions`: the Python functions a `tf.data` pipeline maps over its elements,
  each with the dataset it reads (localize/pipeline_scan).
"""

from __future__ import annotations

import gc

import tensorflow as tf
from keras.src import backend as keras_backend
from keras.src.backend.common import global_state
from keras.src.backend.common.variables import Variable as KerasVariable
from keras.src.backend.tensorflow import nn as keras_nn
from keras.src.optimizers.base_optimizer import BaseOptimizer
from keras.src.trainers.data_adapters import get_data_adapter
from tensorflow.python import pywrap_tfe
from tensorflow.python.autograph.core import ag_ctx, converter
from tensorflow.python.autograph.impl import api as autograph
from tensorflow.python.distribute.distribute_lib import StrategyBase
from tensorflow.python.distribute.values import DistributedValues
from tensorflow.python.eager import context, execute, record
from tensorflow.python.eager.polymorphic_function import polymorphic_function
from tensorflow.python.framework import op_callbacks, op_def_registry, ops
from tensorflow.python.ops import (
    control_flow_util,
    gen_random_ops,
    gen_resource_variable_ops,
    resource_variable_ops,
)
from tensorflow.python.util import tf_stack

try:  # imported once: an import statement run per op cost more than the lookup itself
    from keras.src.backend.common.name_scope import current_path as current_name_scope_path
except ImportError:  # pragma: no cover - other Keras layouts
    current_name_scope_path = None

__all__ = [
    "BaseOptimizer",
    "DistributedValues",
    "KerasVariable",
    "StrategyBase",
    "ag_ctx",
    "autograph",
    "clipped_gradients",
    "context",
    "control_flow_util",
    "converter",
    "current_name_scope_path",
    "execute",
    "flat_layers",
    "gen_random_ops",
    "gen_resource_variable_ops",
    "get_data_adapter",
    "global_state",
    "gradient_registry",
    "keras_backend",
    "keras_nn",
    "learning_rate_variable",
    "op_callbacks",
    "op_def_registry",
    "op_id",
    "ops",
    "polymorphic_function",
    "pywrap_tfe",
    "record",
    "resource_variable_ops",
    "set_gradient_registry",
    "set_learning_rate_variable",
    "tape_flags",
    "tf_stack",
    "trainable_variables_of",
    "updated_variables",
]


def learning_rate_variable(optimizer):
    """The learning rate a Keras optimizer reads while its step is traced (a variable, a
    schedule or a number): `optimizer.learning_rate` gives its value, not this."""
    return optimizer._learning_rate


def set_learning_rate_variable(optimizer, value) -> None:
    """Make `optimizer` read `value` as its learning rate (a trial's, then the user's)."""
    optimizer._learning_rate = value


def trainable_variables_of(optimizer) -> list:
    """The variables `optimizer` was built for, in its slots' order (empty before build)."""
    return list(getattr(optimizer, "_trainable_variables", None) or [])


def updated_variables(optimizer, trainable_variables=None) -> list:
    """The variables an `optimizer.apply(grads, trainable_variables)` call updates: those
    passed, else (Keras's `apply(grads)`) the ones the optimizer was built for."""
    if trainable_variables is not None:
        return list(trainable_variables)
    return trainable_variables_of(optimizer)


def clipped_gradients(optimizer, gradients: list) -> list:
    """`gradients` as `optimizer` clips them inside `apply` (its clipnorm, global_clipnorm
    or clipvalue; unchanged without), before its update reads them."""
    return optimizer._clip_gradients(list(gradients))


def gradient_registry():
    """The registry eager and graph backprop look an op type's gradient function up in."""
    return ops._gradient_registry


def set_gradient_registry(registry) -> None:
    """Make backprop look gradient functions up in `registry` (a wrapper, then the original)."""
    ops._gradient_registry = registry


def op_id(op) -> int:
    """The order `op` was built in its graph (ids grow as ops are added)."""
    return op._id


def variable_handle(variable):
    """The resource handle a `ReadVariableOp` of `variable` reads: a `tf.Variable`'s own,
    a Keras variable's through the `tf.Variable` it wraps (`.value`); None for neither."""
    inner = getattr(variable, "value", variable)
    return getattr(inner, "handle", getattr(variable, "handle", None))


def tape_flags(tape) -> tuple[bool, bool, bool]:
    """A `tf.GradientTape`'s (persistent, watch_accessed_variables, recording now)."""
    return tape._persistent, tape._watch_accessed_variables, tape._recording


def flat_layers(model) -> list:
    """Every layer of `model`, nested ones too, itself first (only `model` when Keras
    keeps no such list for it)."""
    flatten = getattr(model, "_flatten_layers", None)
    return list(flatten()) if flatten is not None else [model]


# Code object of an AutoGraph-converted function -> its source map (None: none found).
_SOURCE_MAPS: dict = {}


def autograph_origin(frame) -> tuple[str, int] | None:
    """(file, line) of the user's code that a frame of an AutoGraph-converted function
    runs, or None for any other frame.

    Once a `tf.function` that is a method has been traced, its instance calls the
    converted function even under `tf.config.run_functions_eagerly(True)` (the method
    wrapper's `__wrapped__` was swapped for it), so an eager replay runs the user's body
    from a generated file. The converted function carries `ag_source_map`, from the
    generated file's lines to the original's; it is found once per code object.
    """
    code = frame.f_code
    if "__autograph_generated_file" not in code.co_filename:
        return None
    if code not in _SOURCE_MAPS:
        _SOURCE_MAPS[code] = next(
            (
                getattr(holder, "ag_source_map", None)
                for holder in gc.get_referrers(code)
                if getattr(holder, "ag_source_map", None) is not None
            ),
            None,
        )
    source_map = _SOURCE_MAPS[code]
    if not source_map:
        return None
    for location, origin in source_map.items():
        if location.filename == code.co_filename and location.lineno == frame.f_lineno:
            return origin.loc.filename, origin.loc.lineno
    return None


def iteration_counter(optimizer):
    """The variable `Optimizer.apply` adds 1 to on every call (`_iterations`); the public
    `iterations` divides it by `gradient_accumulation_steps` when that is set."""
    return getattr(optimizer, "_iterations", None)


def mapped_functions(dataset) -> list[tuple[object, object]]:
    """(the dataset a `map` reads, the user's Python function it maps) for each `map` of
    the pipeline that ends in `dataset`, those nearer the source first.

    A `tf.data` transformation keeps the dataset it reads as `_input_dataset` (a `zip`
    its datasets as `_datasets`, a `concatenate` the second as `_dataset_to_concatenate`),
    and a map its function as a `StructuredFunctionWrapper` whose `_func` is the Python
    function the user passed; no public API walks a pipeline.
    """
    stages: list[tuple[object, object]] = []
    seen: set[int] = set()

    def walk(node) -> None:
        if node is None or id(node) in seen:
            return
        seen.add(id(node))
        upstream = getattr(node, "_input_dataset", None)
        zipped = tf.nest.flatten(getattr(node, "_datasets", None) or ())
        for child in (upstream, *zipped, getattr(node, "_dataset_to_concatenate", None)):
            walk(child)
        function = getattr(getattr(node, "_map_func", None), "_func", None)
        if upstream is not None and callable(function):
            stages.append((upstream, function))

    walk(dataset)
    return stages
