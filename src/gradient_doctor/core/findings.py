"""The results of a diagnosis: frozen dataclasses that the JSON report serialises."""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = (
    "forward_overflow",
    "forward_domain",
    "backward_singularity",
    "exploding_gradients",
    "vanishing_gradients",
    "disconnected_gradients",
    "bad_input",
    "loss_spike",
    "dead_units",
    "saturation",
    # Added: mixed precision's loss scale lowered to the gradients' true size and below
    # while they stay non-finite (Keras 3 sets no floor; training silently stalls).
    "loss_scale_collapse",
    # Added: a step non-finite as XLA compiled it whose replay without XLA stayed finite
    # (no op can be named; it is none of the categories above).
    "xla_only",
    # Added: the optimizer's own update left its dtype's range while the loss and the
    # gradients were finite (Adam's square of a gradient past float16's 65504): the guard
    # checks what goes into an update, so the update ran and wrote inf or NaN.
    "optimizer_overflow",
    # Added: a loss that reads probabilities (Keras's cross-entropies without
    # `from_logits=True`) fed a layer's raw output. Keras clips the values into its
    # range, so nothing goes non-finite: the run learns little or nothing, silently.
    "logits_as_probabilities",
    # Added: the reverse, in PyTorch: a loss that applies its own softmax or sigmoid
    # (`cross_entropy`, `binary_cross_entropy_with_logits`) handed a softmax's or a
    # sigmoid's output, squashed twice: the loss stalls near log(C), silently.
    "probabilities_as_logits",
    # Added: a step that went non-finite where no op could be named (its replay stayed
    # finite, could not run, or recorded no op that wrote the value). Before, such a step
    # was filed as a `loss_spike`, a detector's warning about a finite loss.
    "unlocated_nonfinite",
    # Added: a loss that climbed far above where the run started and stayed there while
    # every value was finite (bounded activations), with a layer's weights growing tenfold
    # or more, or moving by a tenth of their norm a step: the learning rate is too high.
    "loss_diverged",
    # Added: PyTorch's `.grad` never reset between an optimizer's updates (`zero_grad()`
    # once per epoch, or never): each update applies every gradient since, again.
    "stale_gradients",
)

FIX_FAMILIES = (
    "stable_softmax",
    "stable_logsumexp",
    "from_logits",
    "safe_norm",
    "safe_sqrt",
    "safe_log",
    "safe_div",
    "safe_where",
    "clip_input_domain",
    "normalize_input",
    "constrain_weights",
    "lower_learning_rate",
    "gradient_clipping",
    "better_init",
    "batch_normalization",
    "float32_island",
    "loss_scaling",
    "gumbel_softmax",
    "straight_through",
    "reinforce",
    "soft_embedding",
    "compute_inside_tape",
    "stay_in_tensorflow",
    "remove_cast",
    "clean_input",
    "skip_nonfinite_batch",
    "activation_change",
    "custom_gradient",
    "exclude_unused_variables",
    # Added: build the optimizer from the model the loss uses (it held another model's).
    "rebuild_optimizer",
    # Added: a log of a product that underflowed to 0, computed as the sum of the logs.
    "log_space",
    # Added: a std or variance over one value per result (a batch of one example):
    # the last, smaller batch dropped, or the spread taken with correction=0.
    "drop_last_batch",
    "biased_spread",
    # Added: a Keras model frozen (`trainable = False`, for a combined GAN model) before
    # its own train step was built, which then trains nothing: unfreeze it around it.
    "unfreeze_model",
    # Added: reset the gradients after each update (`optimizer.zero_grad()`).
    "reset_gradients",
    # Added: a one-pass variance, E[x^2] - E[x]^2, computed by the framework's own
    # variance (two passes), which cannot cancel below 0.
    "two_pass_variance",
    # Added: a trained variable made with a value its op is undefined at (a temperature
    # or a scale started at 0): start it at 1, where it is made.
    "initial_value",
    # Added for remedies users try that a diagnosis must be able to rule out.
    "larger_batch",
    "regularization",
    "tape_watch",
    "watch_accessed_variables",
    "reorder_tapes",
    "persistent_tape",
    "use_model_fit",
    "remove_stop_gradient",
    # Added: what PyTorch users try on a `.grad` that stays None (none of it helps).
    "requires_grad",
    "retain_graph",
    "zero_grad_to_zeros",
    "detect_anomaly",
    # Added for a softmax over a row that a -inf mask hides entirely.
    "finite_mask",
    # Added for a step that goes non-finite only as XLA compiles it.
    "disable_xla",
    # Added: clip each gradient value, for a global norm that itself overflows.
    "clip_by_value",
    # Added: regression targets far from unit scale (prices in dollars) make the loss
    # and its gradients that large; training on standardised targets removes the cause.
    "normalize_target",
    # Added: the library's sigmoid / softplus for a hand-written one that overflows.
    "library_function",
    # Added: a root or fractional power of the magnitude, for a base negative by design
    # (a signed difference), where a clamp would silence a large share of the values.
    "magnitude",
    # Added: a literal its dtype cannot hold (-1e9 in float16) written as one it can.
    "dtype_safe_constant",
    # Added: PyTorch's spellings of `stay_in_tensorflow` and `compute_inside_tape` (DESIGN.md
    # allows them), so a PyTorch report names no TensorFlow.
    "stay_in_framework",
    "compute_inside_graph",
    # Added: a weight or statistic that was NaN or Inf before training (a broken
    # checkpoint, `set_weights` or `assign` of non-finite values) set from finite ones.
    "finite_weights",
    # Added: a float16 policy's variables (and the optimizer's state with them) kept in
    # float32 by the mixed policy ("mixed_float16"), which still computes in float16.
    "mixed_precision",
    # Added: what users try on a float16 Adam that goes NaN (a larger epsilon); it
    # cannot reach a square that already overflowed.
    "optimizer_epsilon",
    # Added: log|det| by slogdet for the log of a determinant that came out negative (an
    # invertible layer's change of variables needs the magnitude's log).
    "log_abs_determinant",
    # Added: a normalization layer's epsilon above 0 (a constant slice normalised with
    # eps=0 is 0 / 0).
    "layer_epsilon",
    # Added: the options an index picks (a router's experts, a gate's branches) weighted
    # by the softmax of the scores instead.
    "soft_choice",
    # Added: the log of one plus data that holds exact zeros (counts, amounts) in place
    # of its log, which a clamp would send to -16.1 for each of them.
    "log1p",
)


# What an origin's `source` line is: the user's line that ran the op; the line that
# created the library layer whose own code ran it; the call that wrote the non-finite
# value into the variable the op read (`adapt`, `set_weights`, `load_weights`, `assign`);
# the line that built the optimizer whose own update ran it; the user's line in the input
# pipeline (a `tf.data` map's function, a `Dataset.__getitem__`) that made the batch's
# non-finite values.
OPTIMIZER_CREATION = "optimizer_creation"
SOURCE_KINDS = ("op", "layer_creation", "state_write", OPTIMIZER_CREATION, "input_pipeline")


@dataclass(frozen=True)
class TensorStats:
    """Summary of one tensor's values: enough to explain, small enough to print.

    `min`/`max` are taken over the finite values only (None when there are none).
    """

    dtype: str
    shape: tuple[int | None, ...]
    min: float | None
    max: float | None
    nan: int
    inf: int
    zeros: int
    size: int = 0
    pos_inf: int = 0
    neg_inf: int = 0
    min_abs: float | None = None

    @property
    def finite(self) -> bool:
        """True when the tensor holds no NaN and no infinity."""
        return self.nan == 0 and self.inf == 0

    @property
    def largest_magnitude(self) -> float | None:
        """The largest |value| among the finite values, or None when there are none."""
        ends = [abs(end) for end in (self.min, self.max) if end is not None]
        return max(ends) if ends else None


@dataclass(frozen=True)
class SourceLine:
    """A line of the user's own code (never TensorFlow's, Keras's or the doctor's).

    `column` and `end_column`, when known, mark the expression on the line that made
    the op (offsets into `code`): of two `log(...)` calls on one line, the one that
    ran. They are None when the interpreter does not record positions.
    """

    file: str
    line: int
    code: str
    column: int | None = None
    end_column: int | None = None
    # The last line of a statement that spans several (a layer built over lines 12-15).
    end_line: int | None = None

    @property
    def span(self) -> tuple[int, int] | None:
        """(column, end_column) of the expression that made the op, or None."""
        if self.column is None or self.end_column is None:
            return None
        return self.column, self.end_column


@dataclass(frozen=True)
class Origin:
    """The first op that produced a non-finite value from finite inputs.

    For a backward op, `op` is the gradient op's type and `gradient_of` the forward
    op type whose gradient it computes; `source` is the user's line that created
    that forward op. An op that Keras's own code ran inside a library layer (a
    Dense's MatMul, an LSTM cell's ops) has, as `source`, the line that created
    that layer instead (`source_kind` "layer_creation"). `op` and `gradient_of` are in
    the core's vocabulary, which the rules key on; where the framework names them
    otherwise (PyTorch's aten ops), `framework_op` and `framework_gradient_of` hold its
    names, which the report gives.
    """

    op: str
    op_name: str
    layer: str | None
    source: SourceLine | None
    gradient_of: str | None
    inputs: tuple[TensorStats, ...]
    outputs: tuple[TensorStats, ...]
    input_values: tuple[tuple[float, ...], ...] = ()
    # What `source` is (`SOURCE_KINDS`), and the variable whose value the op read
    # or whose update overflowed, when there is one.
    source_kind: str = "op"
    variable: str | None = None
    framework_op: str | None = None
    framework_gradient_of: str | None = None

    @property
    def reported_op(self) -> str:
        """The op as the user's framework names it (`op` where it names it so)."""
        return self.framework_op or self.op

    @property
    def reported_gradient_of(self) -> str | None:
        """`gradient_of` as the user's framework names it."""
        return self.framework_gradient_of or self.gradient_of


@dataclass(frozen=True)
class Fix:
    """A remedy the doctor proposes, with code that fits the user's line.

    Attributes:
        family: the fix family id (`FIX_FAMILIES`).
        title: one line saying what the fix does.
        code: the code to read: the user's line rewritten, with alternatives as
            comments, or a generic snippet when no line of the user's is known.
        verified: True when `patch`, applied, was trialed and held; False when
            it was trialed and failed; None when it was not tried (`evidence` says why).
        evidence: what the trial ran and saw, in words.
        rewrite: the lines that replace the origin op's line, as the rule wrote them
            (empty when the fix does not rewrite that line); the patch is built from it.
        edits: the changes of the user's files this fix makes, placed (file, lines).
        patch: `edits` as a unified diff (`a/` and `b/` prefixes, paths relative to
            the directory the script ran from), or None when the fix has no patch.
        trial_setting: for a patch of a line that built the optimizer or a layer, the
            setting a trial applies to run exactly what the patch writes, as (name,
            value): ("learning_rate", 0.005), ("global_clipnorm", 0.6),
            ("kernel_constraint", 3.0), ("kernel_initializer", "he_normal"); None
            otherwise.
        clamped_share: for a clamp into an op's domain, the share of the failing step's
            values outside it (which the clamp changes, their gradient then 0), when it
            is so large that the values look out of the domain by design; None otherwise.
            A trial that holds cannot verify such a clamp: it rewrites what the code
            computes, and the loss it lowers is the rewritten one.
        stronger: the same remedy a step further (the learning rate lowered another
            decade), placed as its own patch, tried only when this one's trial fails;
            it then stands in for this fix. None when there is no further step.
        keyword_edits: changes of a keyword argument of a call that spans several
            lines (a layer built over lines 12-14), which the rule cannot read whole:
            placed as `edits` where the file is read (`fix_placement`).
        variable_start: for a fix of where a variable is made (`initial_value`), the
            variable and its values; the line that makes it is found where the file
            is read (`fix_placement`).
    """

    family: str
    title: str
    code: str
    verified: bool | None = None
    evidence: str | None = None
    rewrite: tuple[str, ...] = ()
    edits: tuple[Edit, ...] = ()
    patch: str | None = None
    trial_setting: tuple[str, float | str] | None = None
    clamped_share: float | None = None
    stronger: Fix | None = None
    keyword_edits: tuple[KeywordEdit, ...] = ()
    variable_start: VariableStart | None = None


@dataclass(frozen=True)
class VariableStart:
    """A trained variable to start at another value, where the user's code makes it.

    Attributes:
        name: the variable's name as the adapter gives it ("temperature", "flow.scale").
        made_at: the value every element of it is made with now.
        start: the value the fix starts it at.
    """

    name: str
    made_at: float
    start: float


@dataclass(frozen=True)
class KeywordEdit:
    """A keyword argument of the call made by a statement, to be set to a new value.

    Attributes:
        source: the statement (its first line to its `end_line`).
        keyword: the argument's name (`activation`).
        values: the string values it may hold now, one of which it must hold
            (`("relu",)`): a call passing anything else is left alone.
        new: the new value as Python source (`'"softplus"'`).
        callee: only a call of this name is edited (`Dense` of `Dense(5)(h)`);
            None: any call on the lines.
        position: where the argument stands when passed without its name
            (`compile("adam", "mse")` passes `loss` second); None: by name only.
        add: pass the keyword when the call does not pass it at all.
        keras_path: `new` is a path under keras (`losses.BinaryCrossentropy()`),
            spelled as the file imports keras (`keras.` or `tf.keras.`).
        references: the argument may also name one of `values` (a function passed by
            name, `keras.losses.binary_crossentropy`), not only hold it as a literal.
    """

    source: SourceLine
    keyword: str
    values: tuple[object, ...]
    new: str
    callee: str | None = None
    position: int | None = None
    add: bool = False
    keras_path: bool = False
    references: bool = False


@dataclass(frozen=True)
class Edit:
    """One change of a user's file: lines `line` to `end_line` become `new_lines`.

    Attributes:
        file: the file as displayed (relative to the working directory).
        line: the first replaced line, 1-based.
        end_line: the last replaced line (`line - 1` inserts before `line`).
        new_lines: the replacement, each line with its indentation.
        old_lines: the replaced lines as they were (the patch's context check).
    """

    file: str
    line: int
    end_line: int
    new_lines: tuple[str, ...]
    old_lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class NotFix:
    """A common remedy that will not help here, and why.

    Attributes:
        remedy: the fix family id of the remedy.
        why: the reason.
        evidence: what a trial of the remedy ran and saw, or None when untried.
        structural: True when `why` is a fact about the computation that holds
            whatever a trial would show (clipping cannot touch a value computed
            before any gradient); False when it is an expectation, which is said as
            one ("not tried") unless a trial bore it out.
        fix: the remedy written as a fix of the user's code (its patch), for the
            trial; if the trial shows it helps after all, it becomes a fix.
    """

    remedy: str
    why: str
    evidence: str | None = None
    structural: bool = True
    fix: Fix | None = None

    @property
    def untried_expectation(self) -> bool:
        """True when `why` is an expectation that no trial bore out (say it is one):
        none was tried, or its trial could not tell."""
        return not self.structural and (self.evidence is None or self.trial_could_not_tell)

    @property
    def trial_could_not_tell(self) -> bool:
        """True when a trial ran but its evidence says it cannot tell whether the
        remedy helps (`trial_cannot_tell`)."""
        return trial_cannot_tell(self.evidence)


def trial_cannot_tell(evidence: str | None) -> bool:
    """True for a trial's evidence that ends saying the trial cannot tell (the
    unchanged step held too, nothing computing the gradients ran, the weights were
    ruined before its start)."""
    return evidence is not None and evidence.rstrip(")").endswith("cannot tell")


@dataclass(frozen=True)
class BreakPoint:
    """The op where a gradient path from the loss to some variables breaks."""

    op: str
    source: SourceLine | None


@dataclass(frozen=True)
class Disconnected:
    """Variables the user asked to train that received no gradient."""

    variables: tuple[str, ...]
    all: bool
    break_point: BreakPoint | None


@dataclass(frozen=True)
class Headroom:
    """How far a risky op's input is from the value where it leaves the finite range."""

    limit: float
    value: float


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem (or, in the report's `warnings`, one early warning)."""

    category: str
    step: int | None
    phase: str | None
    origin: Origin | None
    explanation: str
    not_fixes: tuple[NotFix, ...] = ()
    fixes: tuple[Fix, ...] = ()
    disconnected: Disconnected | None = None
    forecast_step: int | None = None
    headroom: Headroom | None = None
    replica: int | None = None
    # Under a multi-worker strategy, the task (type, index) that ran `replica`.
    worker: tuple[str, int] | None = None
    # How many updates the doctor skipped for this problem (the failing step's, and
    # any after it before the check was read); 0 when it skipped none.
    skipped_updates: int = 0
    # The script updates its tensors itself (no optimizer): the doctor "skipped" its
    # update by setting the step's gradients to zero before the script read them.
    own_update: bool = False
    # The weights were already non-finite when the failing step began (written before
    # it): skipping its update kept nothing good.
    broken_before: bool = False
