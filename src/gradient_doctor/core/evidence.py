"""What the localizer hands the knowledge base: the origin plus the context around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradient_doctor.core.findings import Origin, SourceLine, TensorStats
from gradient_doctor.core.gradient_paths import PathBreak

if TYPE_CHECKING:  # fields' types only: both read the knowledge base, which reads this
    from gradient_doctor.core.divergence import Divergence
    from gradient_doctor.core.stuck_units import StuckUnits


@dataclass(frozen=True)
class BadItem:
    """The first item of the user's own dataset that holds a non-finite value, where no
    framework op of its `__getitem__` made the value (the data it reads holds it).

    Attributes:
        dataset: the dataset's class name.
        index: the item's index.
        where: which of its tensors holds the values, and how many, in words
            ("its tensor 1 of 2 (shape 6) holds 1 NaN, at position 3").
    """

    dataset: str
    index: int
    where: str


@dataclass(frozen=True)
class StaleGradients:
    """The proof that an optimizer's gradients were not reset between two updates: its
    `.grad` at an update equalled the last update's plus the gradients `backward()`
    added since, and differed from those alone.

    Attributes:
        optimizer: the optimizer's class name.
        update: the 0-based index of the update proved, among that optimizer's.
        carried: the norm of what `.grad` carried over from the updates before.
        fresh: the norm of the gradients `backward()` added since the last update.
    """

    optimizer: str
    update: int
    carried: float
    fresh: float


@dataclass(frozen=True)
class BadInput:
    """Non-finite values found in one tensor of the input batch or its labels.

    `tensor` is its name in the batch (`x`, `y['price']`); a tensor the step was fed
    that the adapter cannot name (a PyTorch script's data, read by a slice of a tensor
    made before the step) has `read_at` instead: the user's line that read it first.
    `rows` and `columns` are empty when the adapter kept only the counts.
    """

    tensor: str
    shape: tuple[int | None, ...]
    nan: int
    inf: int
    rows: tuple[int, ...]
    columns: tuple[int, ...]
    read_at: SourceLine | None = None

    @property
    def label(self) -> str:
        """How a sentence names it: "`x`", or "the tensor read at train.py:10" (one no op
        of the step made: its batch, or a value computed before the step)."""
        if self.read_at is not None:
            return f"the tensor read at {self.read_at.file}:{self.read_at.line}"
        return f"`{self.tensor}`"


@dataclass(frozen=True)
class BrokenState:
    """Variables that already held NaN or Inf when the failing step began.

    Attributes:
        variables: their names, e.g. ("normalization/mean", "normalization/variance").
        layer: the path of the layer that holds them, when known.
        nan: how many of their values are NaN.
        inf: how many are infinite.
        written_by: the call that wrote them, when the doctor saw it: "adapt",
            "set_weights", "load_weights" or "assign".
        written_at: the user's line of that call.
        created_at: the user's line that created their layer.
    """

    variables: tuple[str, ...]
    layer: str | None
    nan: int
    inf: int
    written_by: str | None = None
    written_at: SourceLine | None = None
    created_at: SourceLine | None = None


@dataclass(frozen=True)
class StateValues:
    """What one variable of the training state held: a weight, or a slot of the optimizer.

    Attributes:
        name: its name, e.g. "adam/dense_kernel_velocity" or "dense/kernel".
        dtype: its dtype, e.g. "float16".
        size: how many values it holds.
        nan: how many of them are NaN.
        inf: how many are infinite.
        largest: the largest finite magnitude among them, or None when none is finite.
        weight: for a slot of the optimizer, the weight it keeps state for
            ("dense/kernel"); None for a weight, or when unknown.
        slot: for a slot, its own name beside the weight's ("velocity", "momentum").
    """

    name: str
    dtype: str
    size: int
    nan: int
    inf: int
    largest: float | None = None
    weight: str | None = None
    slot: str | None = None

    @property
    def finite(self) -> bool:
        """True when it holds no NaN and no infinity."""
        return self.nan == 0 and self.inf == 0


@dataclass(frozen=True)
class UpdateOverflow:
    """The optimizer's own update wrote the non-finite weights a failing step read.

    No call of the user's wrote them, and the step before read them finite (its loss
    and gradients were): the last update that ran did. What the optimizer's state
    held then says how, and a replay of the updates from a saved state says when its
    arithmetic first left the dtype's range.

    Attributes:
        optimizer: the optimizer's class, e.g. "Adam".
        read_at: the failing step, which read them.
        written_at: the step whose update wrote the non-finite weights the failing
            step read.
        weights: the weights that were non-finite when the failing step began.
        state: the optimizer's variables that were non-finite then.
        policy: the dtype policy the layers were built under ("float16"), or None.
        policy_site: the user's line that set that policy, when found.
        replayed_from: the step whose saved state the replay started from, or None
            without a replay.
        first_step: the step whose update first left the optimizer's state or the
            weights non-finite, as the replay saw it; None without a replay.
        first_state: what that update left non-finite (slots, then weights).
        weights_step: the step whose update first left the weights non-finite, as the
            replay saw it; None without a replay, or when they stayed finite in it.
        gradients: the gradients that update applied, for the weights whose state it
            left non-finite (`largest` their largest magnitude; `inf` how many of them
            square past their dtype's largest value).
        replayed_on: the batches the replay ran on, in words ("the run's own batches").
        reproduced: the weights the replay left for the failing step are the run's, bit
            for bit (NaN at the same entries): its steps are the run's.
        own_step: the `def step` line of the optimizer's class when the user wrote it
            (a hand-written optimizer's arithmetic is the user's to guard).
    """

    optimizer: str
    read_at: int
    written_at: int
    weights: tuple[StateValues, ...]
    state: tuple[StateValues, ...] = ()
    policy: str | None = None
    policy_site: SourceLine | None = None
    replayed_from: int | None = None
    first_step: int | None = None
    first_state: tuple[StateValues, ...] = ()
    weights_step: int | None = None
    gradients: tuple[StateValues, ...] = ()
    replayed_on: str | None = None
    reproduced: bool = False
    own_step: SourceLine | None = None


@dataclass(frozen=True)
class TargetScale:
    """The regression targets of the failing batch: how far they lie from unit scale.

    Attributes:
        tensor: which they are, as the explanation names them: their name in the batch
            in backticks (`` `y` ``, `` `y['price']` ``, a step's `` `labels` ``), or the
            loss op they fed ("of MseLoss").
        largest: their largest finite magnitude.
        mean: their mean over the batch, when known.
        std: their standard deviation over the batch, when known.
    """

    tensor: str
    largest: float
    mean: float | None = None
    std: float | None = None


@dataclass(frozen=True)
class LossInput:
    """A loss that reads probabilities, fed values that are not (no op made them one).

    Attributes:
        loss: the loss as the framework names it, e.g. "categorical_crossentropy".
        expects: what the loss reads its predictions as: "probabilities".
        activation: the activation whose output it expects, "softmax" or "sigmoid".
        producer: the op that made the predictions, e.g. "BiasAdd" (a layer's raw
            output), or None when only their values are known.
        layer: the layer whose raw output they are, when known (e.g. "dense_1").
        layer_class: that layer's class, e.g. "Dense", as its creation line calls it.
        layer_site: the user's line that built that layer, when known.
        loss_site: the user's line that named or built the loss, when known.
        loss_argument: how `loss_site` passes the loss, which its fix rewrites:
            ("call", name) for a call of the loss class or function `name`
            (`CategoricalCrossentropy()`, `categorical_crossentropy(y, p)`),
            ("name", text) for the loss named by the string `text` in a `compile`
            call, ("reference", name) for the loss function `name` passed to it by
            name; None when the line passes it some other way.
        values: the smallest and largest prediction seen, when they were read.
        made_at: for a loss that applies its own softmax or sigmoid (it reads logits),
            the user's line whose softmax or sigmoid made the values it was handed.
    """

    loss: str
    expects: str
    activation: str
    producer: str | None = None
    layer: str | None = None
    layer_class: str | None = None
    layer_site: SourceLine | None = None
    loss_site: SourceLine | None = None
    loss_argument: tuple[str, str] | None = None
    values: tuple[float, float] | None = None
    made_at: SourceLine | None = None


@dataclass(frozen=True)
class StepHistory:
    """Recent per-step statistics, oldest first; None where a value was not finite."""

    steps: tuple[int, ...] = ()
    losses: tuple[float | None, ...] = ()
    grad_norms: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class TrainingSetup:
    """Settings of the user's training that change which remedies can help.

    Attributes:
        learning_rate: the optimizer's learning rate, when it is a number.
        clipping: the gradient clipping already on, e.g. "global_clipnorm=1.0".
        loss_scale: the dynamic loss scale at the failing step, when a loss-scaling
            optimizer (mixed precision) applies the updates; None otherwise.
        xla: the failing step was compiled with XLA (`jit_compile=True`).
        framework: the framework the user trains with, "tf" or "torch" (as
            `PathBreak.framework`): the remedies are spelled in it.
        optimizer: the class of the user's (first) optimizer, e.g. "SGD", when known.
        own_update: the script updates its tensors itself, with no optimizer of the
            framework's (`w -= lr * w.grad`): its learning rate is a name of its own,
            and a skipped update is its gradients set to zero before it read them.
    """

    learning_rate: float | None = None
    clipping: str | None = None
    loss_scale: float | None = None
    xla: bool = False
    framework: str = "tf"
    optimizer: str | None = None
    own_update: bool = False


@dataclass(frozen=True)
class Reduction:
    """The op that next sums the origin's output (a hand-written softmax's normaliser),
    as the replay saw it, with the user's own text of what groups the entries.

    A max-shift of the origin's input leaves the normalised result unchanged only
    when the shift is constant over each group the reduction sums: one slice along
    `axis`, or one segment.

    Attributes:
        kind: how the entries are grouped: "axis" (along one axis), "segment" (by
            segment ids, with a count of segments), or "sorted_segment" (by sorted
            segment ids, without a count).
        op: the reducing op's type, e.g. "Sum", "UnsortedSegmentSum", "SegmentSum".
        axis: for "axis", the axis as the user wrote it.
        function: the user's spelling of the reducing call (e.g.
            "tf.math.unsorted_segment_sum"), when its line could be read.
        segment_ids: for segments, the user's text of each entry's segment id (for
            a scatter-add, of its indices' first column).
        num_segments: for "segment", the user's text of the number of segments.
        mask: the user's text of a tensor the output was multiplied by before the
            sum (a padding mask), or of the condition of a `where` that kept it;
            None when it reached the sum unmasked.
        mask_is_condition: `mask` is a boolean condition, not a multiplier.
        source: the reducing call's own line.
    """

    kind: str
    op: str
    axis: int | None = None
    function: str | None = None
    segment_ids: str | None = None
    num_segments: str | None = None
    mask: str | None = None
    mask_is_condition: bool = False
    source: SourceLine | None = None


@dataclass(frozen=True)
class OpCall:
    """A call of an op in the failing step's forward pass, as the replay saw it: another
    call of the origin's op (a rule that guards the origin guards it too when its input
    stood in the same risky range: the other bare log of a hand-written cross-entropy),
    or the op that made one of the origin's inputs (the relu whose zeros a log read).

    Attributes:
        op: the op type.
        source: the user's line that made it, with the call's span on that line.
        inputs: its inputs' summaries at the failing step.
        source_kind: what `source` is (`SOURCE_KINDS` in `findings`): "op" for a call
            the line wrote, "layer_creation" for an op a library layer's code ran.
        framework_op: the framework's own name for the op where it is not `op`
            (PyTorch's aten name), which the explanations give.
        outputs: its outputs' summaries at the failing step.
    """

    op: str
    source: SourceLine
    inputs: tuple[TensorStats, ...]
    source_kind: str = "op"
    framework_op: str | None = None
    outputs: tuple[TensorStats, ...] = ()


@dataclass(frozen=True)
class ConstantVariable:
    """A trained variable whose every element holds one value, read by the origin.

    A variable that is still one constant when an op fails on it is, almost always, its
    initial value (`torch.zeros`, `initializer="zeros"`) that no update has moved: the
    step fails by construction, and the fix is where the variable is made.

    Attributes:
        name: the variable's name as the adapter gives it ("temperature", "flow.scale").
        value: the value every element holds.
        input: the input of the origin it is, itself or through ops that keep its
            values' magnitude (`abs`, a reshape).
    """

    name: str
    value: float
    input: int


@dataclass(frozen=True)
class PipelineOrigin:
    """Where the input pipeline wrote the batch's non-finite values: a function of the
    user's that the pipeline maps over its elements (`dataset.map(standardise)`), which
    turned a finite element non-finite, replayed op by op on that element.

    Attributes:
        stage: the transformation and its function, in words ("`map(standardise)`").
        element: the element it was replayed on, in words ("element 408 of what it
            reads (the first it turns non-finite)").
        evidence: the function's replay on that element, as the evidence of a step
            (its `origin` the first op that wrote the non-finite value): the rules
            diagnose it as they diagnose a training step's op.
    """

    stage: str
    element: str
    evidence: Evidence


@dataclass(frozen=True)
class Evidence:
    """Everything known about one failing step, framework-neutral.

    Attributes:
        step: 0-based optimizer step at which the first non-finite value appeared.
        phase: "forward", "backward", or None when no op could be named.
        origin: the first op that produced a non-finite value from finite inputs.
        forward_outputs: for a backward origin, the outputs of the forward op
            whose gradient it is (their values often explain the singularity).
        masked_by_select: for a backward origin, True when the forward op's own
            non-finite output was hidden by a `tf.where`/select in the forward
            pass (the `tf.where` trap).
        bad_inputs: non-finite values found in the batch itself.
        history: recent per-step loss and gradient norms.
        setup: optimizer settings (learning rate, clipping).
        reproduced: False when the replay of the step stayed finite.
        replayed: False when the step could not be run again at all (then
            `reproduced` is False too, but says nothing about the replay).
        unreplayable: why it could not be, in words, when the adapter knows.
        path_break: for missing gradients, where the path from the loss to a
            group of variables breaks.
        all_disconnected: every variable handed to the optimizer lacks a gradient.
        path_breaks: how many places the variables without a gradient are cut at, each
            a finding of its own (two `.item()` lines cutting two parts of a model):
            with more than one, none of them holds all the variables.
        reduction_axis: the axis along which the origin's output is summed next
            (the normalisation of a hand-written softmax), when the replay saw it;
            a max-shift must use this axis to leave the softmax unchanged.
        reduction: the op that sums the origin's output next, whatever groups it
            sums over (an axis, segments, a scatter-add) and any mask on the way;
            its `axis` is `reduction_axis` for an axis (which the headroom
            warnings set alone).
        weights_upstream: whether trainable weights feed the origin's inputs: False
            when the replay traced them back to the batch alone (the data itself
            carries the value), None when unknown.
        weights_upstream_of: `weights_upstream` for each input of a forward origin alone
            (a division whose numerator the weights make but whose denominator, a count
            of the batch's labels, only the data does).
        feeding_ops: the types of the ops a few steps upstream of the origin (a
            Sigmoid before a Log says the log is taken of a probability).
        weights_layer: the layer whose weights feed the origin most directly (the
            closest variable read upstream in the replay), when known.
        weights_variable: when that closest read is of a variable no layer owns (a
            parameter of the root module itself, a free tensor the optimizer trains),
            its name; None otherwise.
        weights_variable_largest: that variable's largest magnitude at the failing
            step, when known.
        read_variables: for each input of the origin, the name of the trained
            variable whose value it is, read with nothing between (`tf.sqrt(variance)`),
            or None: a variable is itself the op's input, not a value made from it.
        nonfinite_constant: the origin is the first op that read a non-finite value
            no op of the step made and the batch did not hold: a constant (a literal
            its dtype cannot hold, like -1e9 in float16) or a tensor made before.
        growth: for a forward overflow of values that were already huge, where they
            first grew past 1e6 on the way: (layer, op type, magnitude it reached).
        input_scale: the batch's input features' largest magnitude, as (the input's
            name, that magnitude), when the step's first input is floating point; from
            an op trace, ("read at train.py:42", magnitude) of the features the step fed
            its first dense or convolution op.
        target_scale: the batch's regression targets (floating-point labels that are
            not class ids), when the adapter can tell them from the features.
        overflowed_norm: when every gradient of the failing update was finite but
            their global norm's square overflowed float32, that norm (measured in
            float64); None otherwise.
        broken_state: the origin only read a variable (a weight or a statistic)
            that held non-finite values before the step; which, and what wrote them.
        update_overflow: when those variables are weights the optimizer trains and no
            call of the user's wrote them, the optimizer's own update that did, and how.
        skipped_updates: how many updates the guard skipped, the failing one and
            every one after it, before the step was read (more than 1 when nothing
            read the step's check until the end of the run); 0 when not counted.
        step_loss: the failing step's loss as its check read it (NaN or inf when the
            loss itself was not finite), or None when it was not read.
        stuck_units: for gradients that stayed exactly zero, the layers whose units
            all died or saturated (then there is no `path_break`), else None.
        divergence: for a run whose loss diverged with every value finite, how it rose
            and the layer whose updates were far too large (`core/divergence.py`).
        stale_gradients: for gradients an optimizer applied again because nothing reset
            them between its updates, the proof by values (the adapter's).
        pipeline: for non-finite values in the batch, the function of the input
            pipeline that wrote them, when the adapter found it; else None.
        bad_item: for non-finite values in the batch that no op of the pipeline made,
            the first item of the user's dataset that holds one; else None.
        same_op_calls: for a forward origin, the step's other forward calls of the
            origin's op (each place once per run of it), in execution order.
        log_of_sum: for a forward origin, the log that reads a sum of its output
            (log(sum(exp(x))) written out, on one line or over several), as a call on
            the user's line; None when no log reads such a sum.
        input_producers: for a forward origin, the op that made each of its inputs,
            aligned with `origin.inputs`, looked for through ops that only reshape,
            view or index a value (`op_trace.VIEW_OPS`); None for an input no op of the
            step made (a weight, the batch, a constant) or one made where no user's
            line is known.
        sigmoid_input: for a forward origin, the sigmoid whose output its first input
            is, itself or through one subtraction (`log(1 - p)` of `p = sigmoid(z)`),
            looked for through views; None when there is none or its line is unknown.
        loss_input: a probability loss fed values that are not probabilities (a
            silent failure: no value is non-finite); None otherwise.
        scaled_up: for a forward origin, the op of a user's line that last scaled its
            first input by a constant (a division by a temperature below 1, a product
            with a factor above 1), with that factor and the largest magnitude before
            it: (call, factor, magnitude); None when no such scaling fed it.
        one_pass_variance: for a forward origin whose input is a variance computed in
            one pass, E[x^2] - E[x]^2 (`op_trace.one_pass_variance`), the subtraction and
            the mean of the squares, each on the user's line; else None.
        zeros_began: for a forward origin whose first input held exact zeros, the op
            upstream that underflowed to them from inputs that held none (a `prod` of
            hundreds of probabilities, an exp of a large negative number); None when
            the zeros came otherwise (a relu, a mask, the data).
        picked_softmax: for a forward origin, or the forward op of a backward one, the
            softmax its first input is picked from through ops that only pick or
            reshape values (a gather of the targets' probabilities), read by nothing
            else on the way (`op_trace.picked_softmax`); None otherwise.
        logged_softmax: for a forward origin, or the forward op of a backward one, the
            softmax whose output it reads as its first input directly (through views),
            whatever else reads that output (`op_trace.softmax_input`); None otherwise.
        forward_blowup: for a step whose every value was finite but whose forward
            values left any sane range (past `op_trace.HUGE`) on their way to the
            loss: first the op where they grew past it from inputs within it, then
            the step's other forward calls of that op on a user's line whose output
            passed it too (a second bare exp of the same log-variance); () otherwise.
        constant_variable: for a forward origin, a trained variable it reads (itself or
            through `abs`, a reshape) whose every element is one value, its initial
            one as a rule; None otherwise.
    """

    step: int | None
    phase: str | None
    origin: Origin | None
    forward_outputs: tuple[TensorStats, ...] = ()
    masked_by_select: bool = False
    bad_inputs: tuple[BadInput, ...] = ()
    history: StepHistory = field(default_factory=StepHistory)
    setup: TrainingSetup = field(default_factory=TrainingSetup)
    reproduced: bool = True
    replayed: bool = True
    unreplayable: str | None = None
    path_break: PathBreak | None = None
    all_disconnected: bool = False
    path_breaks: int = 1
    reduction_axis: int | None = None
    reduction: Reduction | None = None
    overflowed_norm: float | None = None
    weights_upstream: bool | None = None
    weights_upstream_of: tuple[bool | None, ...] = ()
    feeding_ops: frozenset[str] = frozenset()
    weights_layer: str | None = None
    weights_variable: str | None = None
    weights_variable_largest: float | None = None
    read_variables: tuple[str | None, ...] = ()
    nonfinite_constant: bool = False
    growth: tuple[str | None, str, float] | None = None
    input_scale: tuple[str, float] | None = None
    target_scale: TargetScale | None = None
    broken_state: BrokenState | None = None
    update_overflow: UpdateOverflow | None = None
    skipped_updates: int = 0
    step_loss: float | None = None
    stuck_units: StuckUnits | None = None
    divergence: Divergence | None = None
    stale_gradients: StaleGradients | None = None
    pipeline: PipelineOrigin | None = None
    bad_item: BadItem | None = None
    same_op_calls: tuple[OpCall, ...] = ()
    input_producers: tuple[OpCall | None, ...] = ()
    log_of_sum: OpCall | None = None
    sigmoid_input: OpCall | None = None
    loss_input: LossInput | None = None
    forward_blowup: tuple[OpCall, ...] = ()
    zeros_began: OpCall | None = None
    picked_softmax: OpCall | None = None
    logged_softmax: OpCall | None = None
    one_pass_variance: tuple[OpCall, OpCall] | None = None
    constant_variable: ConstantVariable | None = None
    scaled_up: tuple[OpCall, float, float] | None = None
