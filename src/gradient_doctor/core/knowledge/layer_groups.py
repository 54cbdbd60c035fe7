"""Group variable names by the layer that owns them: `gen/dense/kernel` -> `gen/dense`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.knowledge.wording import count, listing

# TensorFlow appends the output index to a variable's name ("dense/kernel:0").
_OUTPUT_INDEX = re.compile(r":\d+$")


@dataclass(frozen=True)
class LayerGroup:
    """The variables of one layer.

    Attributes:
        layer: the layer's path, the variable name without its last component; a
            name without "/" is its own group.
        leaves: the variables' own names within the layer ("kernel", "bias"); empty
            for a name without "/".
    """

    layer: str
    leaves: tuple[str, ...]


def layer_of_name(name: str) -> str:
    """The layer path of a variable or op name: the name without its last part and
    output index (`gen/dense/kernel:0` -> `gen/dense`); a name without "/" is its own."""
    layer, _, leaf = _OUTPUT_INDEX.sub("", name).rpartition("/")
    return layer or leaf


def group_by_layer(names: Sequence[str], separator: str = "/") -> tuple[LayerGroup, ...]:
    """Group variable names by layer path, layers in order of first appearance.

    Example: ("gen/dense/kernel", "gen/dense/bias", "step") -> the groups
    `gen/dense` (kernel, bias) and `step`; with `separator` "." (PyTorch's parameter
    names), ("head.weight", "head.bias") -> `head` (weight, bias).
    """
    leaves: dict[str, list[str]] = {}
    for name in names:
        layer, _, leaf = _OUTPUT_INDEX.sub("", name).rpartition(separator)
        group = leaves.setdefault(layer or leaf, [])
        if layer:  # a name without the separator is a group with no leaves
            group.append(leaf)
    return tuple(LayerGroup(layer, tuple(names)) for layer, names in leaves.items())


def describe_layers(groups: Sequence[LayerGroup], limit: int = 4) -> str:
    """Name the layers and their variables, at most `limit` layers.

    Returns:
        "layer `gen/dense`: kernel, bias" for one layer; for several, "3 layers:
        `gen/dense` (kernel, bias), `gen/norm` (gamma, beta) and `gen/queries` (queries)",
        with "and N more" past `limit`.
    """
    if len(groups) == 1 and groups[0].leaves:
        return f"layer `{groups[0].layer}`: {', '.join(groups[0].leaves)}"
    named = [
        f"`{group.layer}` ({', '.join(group.leaves)})" if group.leaves else f"`{group.layer}`"
        for group in groups
    ]
    if len(groups) == 1:
        return named[0]
    return f"{count(len(groups), 'layer')}: {listing(named, limit)}"


def variable_names(groups: Sequence[LayerGroup], separator: str = "/") -> tuple[str, ...]:
    """The full names of the variables in `groups`, in order (`group_by_layer` undone)."""
    return tuple(
        name
        for group in groups
        for name in (
            [f"{group.layer}{separator}{leaf}" for leaf in group.leaves]
            if group.leaves
            else [group.layer]
        )
    )
