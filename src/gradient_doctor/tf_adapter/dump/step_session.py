"""Run a step's standalone graph once in a fresh TensorFlow session, fetching every tensor.

The graph is imported into a graph of its own, its variable placeholders bound to
fresh variables set from the given values (never the user's), its batch
placeholders fed, and every requested tensor fetched in one run, so each op runs
exactly once, in the graph's own order. Grappler and the classic graph optimizer
are off: every op runs with the same kernel as in an eager replay, unfused.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import gen_resource_variable_ops

IMPORT_SCOPE = "step"
_sessions = itertools.count()


@dataclass(frozen=True)
class SessionRun:
    """What one run of the step produced.

    Attributes:
        values: tensor name (as in the step's graph) -> value, for every numeric
            input and output of the watched ops, and every other tensor asked for.
        ops: watched op name -> (input tensor names, output tensor names).
        variables_after: placeholder name -> the variable's value after the step.
        error: the exception the step raised, if any (then `values` is empty).
    """

    values: dict[str, np.ndarray]
    ops: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]
    variables_after: dict[str, np.ndarray]
    error: BaseException | None


def _config():
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    options = config.graph_options.optimizer_options
    options.opt_level = tf.compat.v1.OptimizerOptions.L0
    options.do_constant_folding = False
    options.do_common_subexpression_elimination = False
    options.do_function_inlining = False
    return config


def run_step_graph(
    graph_def,
    variables: dict[str, np.ndarray],
    feeds: dict[str, np.ndarray],
    watched_ops: list[str] = (),
    also_fetch: list[str] = (),
) -> SessionRun:
    """Run the step once; return the watched ops' values and the variables afterwards.

    Args:
        graph_def: the step's `GraphDef`.
        variables: placeholder name of each variable the step reads -> its value.
        feeds: placeholder name of each other input (batch, constants) -> value.
        watched_ops: names of the ops whose numeric inputs and outputs are fetched.
        also_fetch: names of other tensors to fetch.

    Returns:
        A `SessionRun`.

    Raises:
        ValueError: the graph cannot be imported here (an op this TensorFlow
            build does not have, a placeholder that does not match) or has no
            op or tensor of a name asked for.
        KeyError: likewise, from TensorFlow's lookups.
    """
    run_id = next(_sessions)
    graph = tf.Graph()
    with graph.as_default():
        handles, initializers, initial_values, reads = {}, [], {}, {}
        for n, (name, value) in enumerate(variables.items()):
            dtype = tf.as_dtype(value.dtype)
            with tf.name_scope(f"gradient_doctor_variables/v{n}"):
                handle = gen_resource_variable_ops.var_handle_op(
                    dtype=dtype, shape=value.shape, shared_name=f"gd_{run_id}_{n}"
                )
                initial = tf.compat.v1.placeholder(dtype, value.shape)
                initializers.append(gen_resource_variable_ops.assign_variable_op(handle, initial))
            initial_values[initial] = value
            handles[name] = handle
        tf.graph_util.import_graph_def(graph_def, input_map=handles, name=IMPORT_SCOPE)
        with tf.control_dependencies(None):
            for name, handle in handles.items():
                reads[name] = gen_resource_variable_ops.read_variable_op(
                    handle, tf.as_dtype(variables[name].dtype)
                )
        feed_dict = {_imported(graph, name): value for name, value in feeds.items()}
        # The variables stand where the step's placeholders were: name them as those.
        mapped = {handle.name: name for name, handle in handles.items()}
        structure, fetches = _watch(graph, watched_ops, mapped)
        fetches += [name for name in also_fetch if name not in fetches]
        fetched = [_imported(graph, name) for name in fetches]
        # Ops with no outputs (variable writes) run too, as in the real step.
        targets = [
            op
            for op in graph.get_operations()
            if op.name.startswith(IMPORT_SCOPE + "/") and not op.outputs
        ]
    with tf.compat.v1.Session(graph=graph, config=_config()) as session:
        session.run(initializers, initial_values)
        try:
            results = session.run([fetched, targets], feed_dict)[0]
        except tf.errors.OpError as error:
            return SessionRun({}, structure, {}, error)
        after = session.run(reads)
    return SessionRun(dict(zip(fetches, results)), structure, after, None)


def _watch(graph, names: list[str], mapped: dict[str, str]) -> tuple[dict, list[str]]:
    """Each watched op's input and output names, and its numeric tensors to fetch."""
    structure, fetches, seen = {}, [], set()
    for name in names:
        op = graph.get_operation_by_name(f"{IMPORT_SCOPE}/{name}")
        inputs = tuple(mapped.get(t.name) or _local_name(t) for t in op.inputs)
        outputs = tuple(_local_name(t) for t in op.outputs)
        structure[name] = (inputs, outputs)
        for tensor, local in zip([*op.inputs, *op.outputs], inputs + outputs):
            if local not in seen and _numeric(tensor.dtype):
                seen.add(local)
                fetches.append(local)
    return structure, fetches


def _numeric(dtype) -> bool:
    return dtype.is_floating or dtype.is_integer or dtype.is_complex or dtype == tf.bool


def _local_name(tensor) -> str:
    return tensor.name[len(IMPORT_SCOPE) + 1 :]


def _imported(graph, name: str):
    return graph.get_tensor_by_name(f"{IMPORT_SCOPE}/{name}")
