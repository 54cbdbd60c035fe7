"""Per-layer health of a traced step: gradient and weight norms, activations, stuck units.

While a step is traced, the guard hands over each gradient's sum of squares (which
it computes anyway) and the variables. This module groups the variables by layer and
adds, inside the compiled step, a few reductions that run only every `every` steps
(a `cond` on a counter; the other steps pay one comparison): per layer the gradient
norm, the weight norm, and for the layer's ReLU / sigmoid / tanh ops the largest
|pre-activation|, the fraction of units that were 0 for the whole batch (dead) and
the fraction stuck in the flat part of the curve (saturated). The values land in one
small variable per traced step, which the watcher reads back on the same schedule.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import tensorflow as tf

from gradient_doctor.core.knowledge.layer_groups import layer_of_name
from gradient_doctor.core.records import SIGMOID_FLAT, TANH_FLAT, LayerRecord
from gradient_doctor.tf_adapter.step.doctor_variables import doctor_variable
from gradient_doctor.tf_adapter.step.xla_branches import keep_branch

FIELDS = ("grad_norm", "weight_norm", "activation_max_abs", "dead_fraction", "saturated_fraction")
_DEAD_OPS = frozenset({"Relu", "Relu6"})
_SATURATING_OPS = {"Sigmoid": "sigmoid", "Tanh": "tanh"}
_BELOW_ONE = 1.0 - 2.0**-24  # the largest float32 below 1 (keeps atanh and logit finite)
_MISSING = -1.0  # a field not measured for a layer (a negative value none of them takes)


def layer_of(variable) -> str:
    """The layer a variable belongs to: its path without the last part."""
    return layer_of_name(getattr(variable, "path", None) or variable.name)


@dataclass
class _Site:
    """One traced step's layers and the variable holding their latest values."""

    layers: list[str]
    holder: tf.Variable
    # Each step's gradient norm of the layers with variables, in a ring of `every` rows.
    ring: tf.Variable
    grad_layers: list[str]


class LayerStats:
    """Measures per-layer statistics in traced steps, every `every` steps.

    Args:
        every: int, measure on every this-many-th step (the others skip the
            reductions). Defaults to 10.
    """

    def __init__(self, every: int = 10) -> None:
        self.every = every
        self._sites: dict[tuple[str, ...], _Site] = {}
        self._measured: set[tuple[int, tuple[str, ...]]] = set()
        self._graphs_with_activations: set[int] = set()
        self._counter: tf.Variable | None = None
        # Per group of updated layers: the variable holding each layer's latest update norm.
        self._updates: dict[tuple[str, ...], tf.Variable] = {}

    def measure(self, graph, variables, squares, sparse: set[int] = frozenset()) -> None:
        """Add the per-layer reductions for one update of the step traced in `graph`.

        Each group of variables is measured once per graph (a GAN's step updates
        several groups); the activations of the graph go with its first group.

        Args:
            graph: the graph of the step being traced.
            variables: the variables updated, in the order of `squares`.
            squares: float32 vector, the sum of squares of each gradient.
            sparse: ids of the variables whose gradient is sparse (`IndexedSlices`,
                an embedding's): their weight norm is not measured, since reading a
                whole table that is updated sparsely makes TensorFlow copy it.
        """
        names = tuple(layer_of(v) + "/" + v.name for v in variables)
        if not variables or (id(graph), names) in self._measured:
            return
        self._measured.add((id(graph), names))
        grad_sums: dict[str, list[int]] = {}  # layer -> positions of its variables
        weights: dict[str, list] = {}
        for position, variable in enumerate(variables):
            layer = layer_of(variable)
            grad_sums.setdefault(layer, []).append(position)
            if id(variable) not in sparse:
                weights.setdefault(layer, []).append(variable)
        activations = {}
        if id(graph) not in self._graphs_with_activations:
            self._graphs_with_activations.add(id(graph))
            activations = _activation_ops(graph, _layers_by_handle(graph, variables))
        layers = list(grad_sums) + [name for name in activations if name not in grad_sums]
        key = tuple(layers)
        try:
            site = self._site(key, list(grad_sums))
            counter = self._step_counter()
        except ValueError:  # a retrace may not create variables: go unmeasured
            return
        # Every step: the layers' gradient norms (from sums the guard made anyway) into
        # the ring, so trends are seen step by step though read every `every` steps.
        # One segment sum over the vector of squares, not one sum per layer.
        segments = [0] * len(variables)
        for index, layer in enumerate(site.grad_layers):
            for position in grad_sums[layer]:
                segments[position] = index
        norms = tf.sqrt(
            tf.math.unsorted_segment_sum(squares, segments, num_segments=len(site.grad_layers))
        )
        # A row mask, not a sliced assign: XLA would compile a sliced assign at a moving
        # index again on every step. (`where`, not a product: a row holding inf stays
        # replaceable.)
        slot = tf.equal(tf.range(self.every, dtype=counter.dtype), counter % self.every)
        site.ring.assign(tf.where(slot[:, None], norms[None, :], site.ring))

        def sample():
            rows = []
            for layer in layers:
                row = [_MISSING] * len(FIELDS)
                if weights.get(layer):
                    row[1] = tf.sqrt(
                        tf.add_n(
                            [2.0 * tf.nn.l2_loss(tf.cast(v, tf.float32)) for v in weights[layer]]
                        )
                    )
                row[2:] = _activation_row(activations.get(layer, []))
                rows.append(tf.stack([tf.cast(v, tf.float32) for v in row]))
            site.holder.assign(keep_branch(tf.stack(rows)))  # computed 1 step in `every`
            return tf.constant(True)

        tf.cond(counter % self.every == 0, sample, lambda: tf.constant(False))
        counter.assign_add(1)

    def _site(self, key: tuple[str, ...], grad_layers: list[str]) -> _Site:
        site = self._sites.get(key)
        if site is None:
            with tf.init_scope():
                holder = doctor_variable(
                    tf.fill([len(key), len(FIELDS)], _MISSING), "gradient_doctor_layer_stats"
                )
                ring = doctor_variable(
                    tf.fill([self.every, len(grad_layers)], _MISSING),
                    "gradient_doctor_layer_grad_norms",
                )
            site = self._sites[key] = _Site(list(key), holder, ring, grad_layers)
        return site

    def _step_counter(self) -> tf.Variable:
        if self._counter is None:
            with tf.init_scope():
                self._counter = doctor_variable(
                    tf.constant(0, tf.int64), "gradient_doctor_layer_steps"
                )
        return self._counter

    def sampling_now(self) -> tf.Tensor | None:
        """True on the steps that measure (a tensor of the step being traced).

        None when the counter cannot be made (a retrace may not create variables).
        """
        try:
            counter = self._step_counter()
        except ValueError:
            return None
        return counter % self.every == 0

    @contextmanager
    def recording_updates(self, optimizers, variables, sampled_only: bool = True) -> Iterator[None]:
        """While the block traces an optimizer update, measure each layer's update norm.

        Keras optimizers move each weight through their own `assign_add` or
        `assign_sub` (Adam, RMSprop, SGD with or without momentum); for the duration
        of the trace these are wrapped on the optimizer instances to keep, per
        trainable variable, the change they are handed (a tensor that exists anyway).
        At the end of the block, inside the update (so only applied updates count) and
        only on the sampled steps, the layers' update norms are reduced from those
        changes and stored; they are read as `update_ratio` = update norm / weight norm.
        A weight replaced whole (`assign`) is not measured: its change would need a
        copy of the old weight.

        Args:
            optimizers: the optimizers whose writes are measured (None entries skipped).
            variables: the trainable variables being updated.
            sampled_only: bool. Measure behind this module's own `cond` on the sampled
                steps; False when the caller traces the block on sampled steps only.
                Defaults to True.
        """
        layers_by_variable = {id(_backing(v)): layer_of(v) for v in variables}
        changes: dict[str, list] = {}
        graph = tf.compat.v1.get_default_graph()

        def wrap(original):
            def write(variable, value):
                layer = layers_by_variable.get(id(_backing(variable)))
                # A write inside the optimizer's own `cond` (gradient accumulation) makes
                # tensors the end of the block cannot reach: those are not measured.
                same_graph = tf.compat.v1.get_default_graph() is graph
                if layer is not None and same_graph and not isinstance(value, tf.IndexedSlices):
                    changes.setdefault(layer, []).append(value)
                return original(variable, value)

            return write

        patched = []
        for optimizer in optimizers:
            if optimizer is None or "assign_sub" in vars(optimizer):
                continue
            for name in ("assign_add", "assign_sub"):
                original = getattr(optimizer, name, None)
                if original is not None:
                    setattr(optimizer, name, wrap(original))
                    patched.append((optimizer, name))
        try:
            yield
            if changes:
                self._write_update_norms(changes, sampled_only)
        finally:
            for optimizer, name in patched:
                vars(optimizer).pop(name, None)

    def _write_update_norms(self, changes: dict[str, list], sampled_only: bool) -> None:
        key = tuple(changes)
        holder = self._updates.get(key)
        try:
            counter = self._step_counter()
            if holder is None:
                with tf.init_scope():
                    holder = doctor_variable(
                        tf.fill([len(key)], _MISSING), "gradient_doctor_update_norms"
                    )
                self._updates[key] = holder
        except ValueError:  # a retrace may not create variables: go unmeasured
            return

        def sample():
            norms = [
                tf.sqrt(
                    tf.add_n([2.0 * tf.nn.l2_loss(tf.cast(c, tf.float32)) for c in changes[layer]])
                )
                for layer in key
            ]
            holder.assign(keep_branch(tf.stack(norms)))
            return tf.constant(True)

        if not sampled_only:
            sample()
            return
        # The same steps as the weight norms: the counter moves on after the update.
        tf.cond(counter % self.every == 0, sample, lambda: tf.constant(False))

    def _update_norms(self) -> dict[str, float]:
        norms = {}
        for key, holder in self._updates.items():
            for layer, value in zip(key, holder.numpy()):
                if value != _MISSING and math.isfinite(float(value)):
                    norms[layer] = float(value)
        return norms

    def read_grad_norms(self) -> list[tuple[LayerRecord, ...]]:
        """Each layer's gradient norm over the last `every` steps, oldest first.

        Rows not written yet (the first steps of a run) are left out.
        """
        if self._counter is None:
            return []
        start = int(self._counter.numpy()) % self.every
        steps: list[list[LayerRecord]] = [[] for _ in range(self.every)]
        for site in self._sites.values():
            ring = site.ring.numpy()
            for position in range(self.every):
                row = ring[(start + position) % self.every]
                steps[position].extend(
                    LayerRecord(layer, grad_norm=float(value))
                    for layer, value in zip(site.grad_layers, row)
                    if value != _MISSING and math.isfinite(float(value))
                )
        return [tuple(records) for records in steps if records]

    def read(self) -> tuple[LayerRecord, ...]:
        """The latest sampled values of every layer (one small host copy per site).

        Gradient norms are left to `read_grad_norms`, which has every step's; the
        update ratio is the latest update's norm over the sampled weight norm.
        """
        updates = self._update_norms()
        records = []
        for site in self._sites.values():
            for layer, row in zip(site.layers, site.holder.numpy()):
                values = {
                    name: float(v) if v != _MISSING and math.isfinite(float(v)) else None
                    for name, v in zip(FIELDS, row)
                }
                weight_norm, update = values["weight_norm"], updates.get(layer)
                ratio = update / weight_norm if update is not None and weight_norm else None
                records.append(LayerRecord(layer, update_ratio=ratio, **values))
        return tuple(records)


def _backing(variable):
    """The tf.Variable behind a Keras variable (the variable itself otherwise)."""
    return getattr(variable, "value", None) if hasattr(variable, "path") else variable


def _layers_by_handle(graph, variables) -> dict[str, str]:
    """The name of the op standing for each variable inside `graph` -> the variable's layer.

    A traced step reads a variable through a placeholder that captures its handle.
    """
    by_handle = {id(v.handle): layer_of(v) for v in variables if hasattr(v, "handle")}
    found = {}
    for external, internal in getattr(graph, "captures", ()):
        layer = by_handle.get(id(external))
        if layer is not None:
            found[internal.op.name] = layer
    return found


def _owning_layer(op, layers_by_handle: dict[str, str], depth: int = 6) -> str | None:
    """The layer of the first variable met walking up from `op` (its kernel, its bias)."""
    frontier, seen = [op], set()
    for _ in range(depth):
        following = []
        for current in frontier:
            for tensor in current.inputs:
                source = tensor.op
                if source.name in layers_by_handle:
                    return layers_by_handle[source.name]
                if source.name not in seen:
                    seen.add(source.name)
                    following.append(source)
        frontier = following
    return None


def _activation_ops(graph, layers_by_handle: dict[str, str]) -> dict[str, list]:
    """The forward ReLU / sigmoid / tanh ops of the step, by layer (gradient ops skipped).

    An op is put with the layer whose variables feed it (a Dense's activation with the
    Dense), else with its name scope (a layer without variables).
    """
    found: dict[str, list] = {}
    for op in graph.get_operations():
        if op.type not in _DEAD_OPS and op.type not in _SATURATING_OPS:
            continue
        if op.name.startswith("gradient_tape/") or not op.outputs:
            continue
        output = op.outputs[0]
        if not output.dtype.is_floating or output.shape.rank is None or output.shape.rank < 1:
            continue
        layer = _owning_layer(op, layers_by_handle) or layer_of_name(op.name)
        found.setdefault(layer, []).append(op)
    return found


def _largest_pre_activation(op_type: str, output: tf.Tensor) -> tf.Tensor:
    """The largest |pre-activation| of an activation op, recovered from its output.

    The input itself is not read: a second reader of a Dense's pre-activation stops
    oneDNN from fusing the MatMul, BiasAdd and activation into one kernel, and the
    unfused kernels round differently, so the watched run would no longer be
    bit-identical. ReLU gives back its positive pre-activations; sigmoid and tanh are
    inverted at the output furthest from their centre (a lower bound where the output
    rounds to the asymptote: about 16.6 for sigmoid, 9 for tanh in float32).
    """
    if op_type in _DEAD_OPS:
        return tf.reduce_max(output)
    if _SATURATING_OPS[op_type] == "tanh":
        return tf.math.atanh(tf.minimum(tf.reduce_max(tf.abs(output)), _BELOW_ONE))
    furthest = tf.minimum(0.5 + tf.reduce_max(tf.abs(output - 0.5)), _BELOW_ONE)
    return tf.math.log(furthest) - tf.math.log1p(-furthest)  # logit


def _activation_row(ops) -> list:
    """[max |pre-activation|, dead fraction, saturated fraction] of a layer's ops."""
    if not ops:
        return [_MISSING] * 3
    largest, dead, saturated = [], [], []
    for op in ops:
        after = tf.cast(op.outputs[0], tf.float32)
        largest.append(_largest_pre_activation(op.type, after))
        batch_axes = list(range(after.shape.rank - 1))  # units are the last axis
        if op.type in _DEAD_OPS:
            stuck = tf.reduce_all(tf.equal(after, 0.0), axis=batch_axes)
            dead.append(tf.reduce_mean(tf.cast(stuck, tf.float32)))
        else:
            flat = (
                tf.abs(after) > TANH_FLAT
                if _SATURATING_OPS[op.type] == "tanh"
                else tf.logical_or(after < SIGMOID_FLAT, after > 1.0 - SIGMOID_FLAT)
            )
            stuck = tf.reduce_all(flat, axis=batch_axes)
            saturated.append(tf.reduce_mean(tf.cast(stuck, tf.float32)))
    return [
        tf.reduce_max(tf.stack(largest)),
        tf.reduce_max(tf.stack(dead)) if dead else _MISSING,
        tf.reduce_max(tf.stack(saturated)) if saturated else _MISSING,
    ]
