"""Find where the gradient path from the loss to some variables breaks, on a neutral graph."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import SourceLine

# How a path can break (the knowledge base explains each).
NON_DIFFERENTIABLE = "non_differentiable"  # an op on the path has no gradient
OUTSIDE_TAPE = "outside_tape"  # an op on the path ran while no tape was recording
LEFT_FRAMEWORK = "left_framework"  # the value left the framework (numpy) and came back
NOT_USED = "not_used"  # the variable is read, but the loss does not depend on it
NEVER_READ = "never_read"  # the step never reads the variable (a layer not called)
ZERO_GRADIENT = "zero_gradient"  # a gradient exists but was exactly zero on every step
UNLOCATED = "unlocated"  # no gradient, but the adapter could not look for the break
NOT_WATCHED = "not_watched"  # the tape watched only what it was given, and not these
# The loss's gradients went to other parameters, which no optimizer updates: the optimizer
# was built from another model object (one made again after it).
OTHER_PARAMETERS = "other_parameters"
# A model trained on its own (`fit`, `train_on_batch`) while none of its weights was
# trainable: no path to break, its step has nothing to update.
FROZEN = "frozen"
BREAK_KINDS = (
    NON_DIFFERENTIABLE,
    OUTSIDE_TAPE,
    LEFT_FRAMEWORK,
    NOT_USED,
    NEVER_READ,
    ZERO_GRADIENT,
    UNLOCATED,
    NOT_WATCHED,
    OTHER_PARAMETERS,
    FROZEN,
)


@dataclass(frozen=True)
class Node:
    """One op of the step's dataflow, as an adapter describes it.

    Attributes:
        index: creation (or execution) order.
        op_type: the framework's op type.
        input_ids, output_ids: opaque tensor ids.
        output_shapes: the shapes of the outputs, where known.
        source: the user's line that created the op.
        differentiable: False when gradients cannot flow through the op
            (no gradient registered, integer or boolean outputs, stop_gradient).
        recorded: False when the op ran while the tape that computed the
            gradients was not recording.
        structural: the op reads only its input's shape (never where a value's
            gradient is lost, though it has none).
        integer_outputs: the outputs of an integer or boolean dtype, which carry no
            gradient even where the op has one for its other outputs (the indices
            of `top_k`, beside its values).
        leaves_framework: the op hands its input's value to the host language as a
            plain number (PyTorch's `.item()`): a path that ends there left the framework.
    """

    index: int
    op_type: str
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    source: SourceLine | None
    differentiable: bool = True
    recorded: bool = True
    structural: bool = False
    output_shapes: tuple[tuple[int | None, ...] | None, ...] = ()
    integer_outputs: frozenset[int] = frozenset()
    leaves_framework: bool = False


@dataclass(frozen=True)
class PathBreak:
    """Variables whose gradient path breaks at the same place.

    Attributes:
        kind: one of `BREAK_KINDS`.
        node: the op where the path breaks (None for `never_read`).
        variables: the variables' names.
        reentry: for `left_framework`, the user's line where the value came back.
        gradient_call: the user's line of the `tape.gradient(...)` call that returned
            None for these variables, when the adapter saw it (a fix written into
            the tape's block names that call's target loss).
        framework: the framework the step ran in, "tf" or "torch": the account and
            its fixes are spelled in it.
        why: for `unlocated`, why the break was not looked for, in words ("the rerun
            stopped before update 12").
        trained_instead: for `other_parameters`, the parameters that got the gradients
            (of the model the step ran), which no optimizer updates.
        optimizer_line: for `other_parameters`, the user's line that built the optimizer.
        model: for `frozen`, the name of the model whose own training trains nothing.
        trained_at: for `frozen`, the user's line that trained it (`d.train_on_batch(...)`).
        picks_rows: for a break at a pick (an argmax, a sample), whether the picked
            indices go on to a lookup (an embedding's gather, a one-hot: tokens), or
            are used otherwise (a router's index made a mask); None when not a pick.
        filled_in: the user's code replaced the None gradients by tensors of its own
            (`g if g is not None else tf.zeros_like(v)`) before the update, so nothing
            warned.
    """

    kind: str
    node: Node | None
    variables: tuple[str, ...]
    reentry: SourceLine | None = None
    gradient_call: SourceLine | None = None
    framework: str = "tf"
    why: str | None = None
    trained_instead: tuple[str, ...] = ()
    optimizer_line: SourceLine | None = None
    model: str | None = None
    trained_at: SourceLine | None = None
    picks_rows: bool | None = None
    filled_in: bool = False


def cancelled_biases(
    zero: Sequence[str], trained: Sequence[str], separator: str = "/"
) -> tuple[str, ...]:
    """The biases among `zero` (variables whose gradient was exactly zero on every step
    of a window) whose own layer trains: another of its variables is in `trained`.

    A layer's bias gets the batch's sum of the gradient at the layer's output, its
    kernel that gradient times the layer's inputs. A kernel that trains shows that the
    output's gradient is not zero, so the bias's zero is its sum cancelling, exactly,
    on every step: the loss does not depend on a shift of that output (a layer applied
    to both sides of a difference, as a siamese or triplet net's last layer is; a
    normalisation right after it). No path is broken there, and nothing is lost.

    Args:
        zero: the names of the variables whose gradient stayed exactly zero.
        trained: the names of the other variables the same updates applied.
        separator: what separates a layer's path from a variable's own name ("/" in
            Keras, "." in PyTorch).
    """
    layers_trained = {name.rpartition(separator)[0] for name in trained}
    return tuple(
        name
        for name in zero
        if name.rpartition(separator)[2].split(":")[0] == "bias"
        and name.rpartition(separator)[0] in layers_trained
    )


def find_breaks(
    nodes: list[Node],
    loss_ids: tuple[int, ...],
    variable_reads: dict[str, tuple[int, ...]],
    outside_values: dict[int, tuple[int | None, ...]] | None = None,
) -> list[PathBreak]:
    """Group the variables by where their path to the loss breaks.

    Args:
        nodes: the step's ops in creation/execution order.
        loss_ids: the tensor(s) that were differentiated.
        variable_reads: for each variable without a gradient, the ids of the
            tensors the step read from it (empty when never read).
        outside_values: tensors that no op of the step produced and that are not
            the step's inputs or small constants, with their shapes: where a value
            that left the framework (a numpy round trip) may have come back.

    Returns:
        One `PathBreak` per distinct break, variables in the given order.
    """
    producer = {t: n for n in nodes for t in n.output_ids}
    consumers: dict[int, list[Node]] = {}
    for node in nodes:
        for tensor in set(node.input_ids):
            consumers.setdefault(tensor, []).append(node)
    loss_ancestors = _ancestors(loss_ids, producer)

    groups: dict[tuple, list[str]] = {}
    found: dict[tuple, PathBreak] = {}
    for name, reads in variable_reads.items():
        loss_made_outside = bool(loss_ids) and not any(t in producer for t in loss_ids)
        result = _break_of(
            reads, producer, consumers, loss_ancestors, outside_values or {}, loss_made_outside
        )
        key = (result.kind, result.node.index if result.node else None)
        groups.setdefault(key, []).append(name)
        found.setdefault(key, result)
    return [
        PathBreak(
            found[key].kind,
            found[key].node,
            tuple(names),
            found[key].reentry,
            picks_rows=_picks_rows(found[key], consumers),
        )
        for key, names in groups.items()
    ]


# Ops that stop the gradient on purpose, and ops that pick a value (an index, a sample).
_DELIBERATE_STOPS = frozenset({"StopGradient", "PreventGradient"})
_PICKS = frozenset(
    {"ArgMax", "ArgMin", "TopKV2", "Multinomial", "RandomCategorical", "StatelessMultinomial"}
    | {"argmax", "argmin", "topk", "multinomial"}
)


# Ops that read rows of a table by integer index, or make one-hot rows of indices: what
# tokens go to (the core's op types: PyTorch's `embedding`, `index_select` and `one_hot`
# are named so by its adapter; `embedding_bag` keeps its aten name).
_LOOKUPS = frozenset(
    {"GatherV2", "Gather", "ResourceGather", "GatherNd", "ResourceGatherNd", "OneHot"}
    | {"embedding_bag"}
)
# How many ops past a pick its indices are followed to a lookup (a reshape, a cast to
# another integer type, a concatenation of the tokens with real ones come between).
_TO_A_LOOKUP = 6


def _picks_rows(path_break: PathBreak, consumers) -> bool | None:
    """For a break at a pick, whether its indices reach a lookup within `_TO_A_LOOKUP`
    ops (`PathBreak.picks_rows`); None for any other break."""
    node = path_break.node
    if path_break.kind != NON_DIFFERENTIABLE or node is None or node.op_type not in _PICKS:
        return None
    level, seen = list(node.output_ids), set()
    for _ in range(_TO_A_LOOKUP):
        users = [n for t in level for n in consumers.get(t, []) if n.index not in seen]
        if any(n.op_type in _LOOKUPS for n in users):
            return True
        seen.update(n.index for n in users)
        level = [t for n in users for t in n.output_ids]
    return False


def _ancestors(tensor_ids, producer) -> set[int]:
    seen: set[int] = set()
    pending = list(tensor_ids)
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        node = producer.get(tensor)
        if node is not None:
            pending.extend(node.input_ids)
    return seen


def _break_of(
    reads, producer, consumers, loss_ancestors, outside_values, loss_made_outside
) -> PathBreak:
    if not reads:
        return PathBreak(NEVER_READ, None, ())
    # Walk forward from the variable's reads, in op order, along tensors the loss uses.
    reached: set[int] = set(reads)
    first_users = {n.index: n for t in reads for n in consumers.get(t, [])}
    frontier = deque(sorted(first_users.values(), key=lambda n: n.index))
    blocking: list[Node] = []
    sinks: list[Node] = []
    detached: list[int] = []  # values a stop_gradient passed on, off the loss's path
    visited: set[int] = set()
    while frontier:
        node = frontier.popleft()
        if node.index in visited:
            continue
        visited.add(node.index)
        carried = [t for t in node.output_ids if t not in node.integer_outputs]
        feeds_loss = any(t in loss_ancestors for t in node.output_ids)
        carries = node.differentiable and any(t in loss_ancestors for t in carried)
        if feeds_loss and (not carries or not node.recorded):
            blocking.append(node)
            continue
        if node.op_type in _DELIBERATE_STOPS:
            detached.extend(node.output_ids)
        reached.update(carried)
        next_nodes = [c for t in carried for c in consumers.get(t, [])]
        if not next_nodes:
            sinks.append(node)
        frontier.extend(next_nodes)
    if blocking:
        # Every path is blocked somewhere; side paths (a stop_gradient inside a
        # normalisation, a shape read) are blocked early, the main flow last.
        candidates = [n for n in blocking if not n.structural] or blocking
        # A value picked (an index, a sample) where a stop_gradient also blocks another
        # path is the break: the stop is most often deliberate (a VQ-VAE's codebook
        # term), the pick is what cuts the main flow (its argmin to the decoder).
        if any(n.op_type in _DELIBERATE_STOPS for n in candidates):
            candidates = [n for n in candidates if n.op_type in _PICKS] or candidates
        last = max(candidates, key=lambda n: n.index)
        kind = OUTSIDE_TAPE if last.differentiable and not last.recorded else NON_DIFFERENTIABLE
        return PathBreak(kind, last, ())
    reentry = _reentry(sinks, consumers, loss_ancestors, outside_values)
    exits = [n for n in sinks if n.leaves_framework]
    if reentry is None and not exits:
        # A value detached, then taken out of the framework (`p.detach().numpy()` in a
        # helper), and a loss made anew from what came back: the exit is the break.
        exits = _exits_after(detached, consumers)
        reentry = _reentry(exits, consumers, loss_ancestors, outside_values) if exits else None
        exits = exits if reentry is not None or loss_made_outside else []
    if reentry is not None or exits or (loss_made_outside and sinks):
        return PathBreak(LEFT_FRAMEWORK, max(exits or sinks, key=lambda n: n.index), (), reentry)
    last = max((producer[t] for t in reached if t in producer), key=lambda n: n.index, default=None)
    return PathBreak(NOT_USED, last, ())


def _exits_after(tensors: list[int], consumers) -> list[Node]:
    """The ops that took a value out of the framework (`.numpy()`, `.item()`) downstream
    of `tensors`, following every op whatever it carries."""
    exits, seen, pending = [], set(), list(tensors)
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for user in consumers.get(tensor, []):
            if user.leaves_framework and all(user is not e for e in exits):
                exits.append(user)
            pending.extend(user.output_ids)
    return exits


def _reentry(sinks, consumers, loss_ancestors, outside_values) -> SourceLine | None:
    """The user's line where a value shaped like one of `sinks` came back into the loss
    (any value, when one left as plain numbers: `.item()` results keep no shape)."""
    sink_shapes = {shape for node in sinks for shape in node.output_shapes if shape is not None}
    shapeless = any(node.leaves_framework for node in sinks)
    for tensor in sorted(t for t in loss_ancestors if t in outside_values):
        if not shapeless and outside_values[tensor] not in sink_shapes:
            continue
        for user in consumers.get(tensor, []):
            if any(o in loss_ancestors for o in user.output_ids):
                return user.source
    return None
