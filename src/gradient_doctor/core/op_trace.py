"""A framework-neutral record of the ops one replayed step executed, in order."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.findings import SourceLine, TensorStats


@dataclass(frozen=True)
class OpEvent:
    """One executed op: what it read, what it wrote, and where the user created it.

    Tensor ids are opaque integers that identify the same tensor across events
    (an adapter keeps the tensors alive while the trace is in use).

    Attributes:
        index: position in execution order.
        op_type: the framework's op type (e.g. "Exp", "SqrtGrad").
        op_name: a readable name, "layer/path/OpType".
        layer: the Keras layer (or module) path active when the op ran, if any.
        phase: "forward" or "backward".
        gradient_of: for a backward op, the forward op type whose gradient it computes.
        forward_index: for a backward op, the index of that forward op's event.
        input_ids, output_ids: tensor ids.
        inputs, outputs: value summaries, aligned with the ids.
        source: the user's line that created the op (for a backward op, the line
            that created its forward op).
        input_values: a few of the input values, for the report.
    """

    index: int
    op_type: str
    op_name: str
    layer: str | None
    phase: str
    gradient_of: str | None
    forward_index: int | None
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    inputs: tuple[TensorStats, ...]
    outputs: tuple[TensorStats, ...]
    source: SourceLine | None
    input_values: tuple[tuple[float, ...], ...] = ()

    @property
    def creates_nonfinite(self) -> bool:
        """True when some output is non-finite although every input was finite."""
        return all(s.finite for s in self.inputs) and any(not s.finite for s in self.outputs)
