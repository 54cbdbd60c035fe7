"""Judge fix trials: did training go on finite, and learning, with the remedy in place?

A trial starts from the last good state (the weights before the failing step) and
runs the step again for a number of steps with one remedy applied. The unchanged
step is run the same way first (the baseline): a remedy only counts as verified
when the unchanged step fails again within the trial and the remedied one does not,
and the remedied run went on learning (`TrialOutcome.shortfall` states the rule):

- its gradients were not (almost) all exactly zero: a clamp that zeroes every
  gradient keeps training finite and useless;
- with one objective, its loss did not diverge over the trial and ended no worse
  than before the trouble began (or, where the trial ended on the failing batch
  repeated, which the earlier batches do not compare with, fell on that batch);
  with no loss from before the trouble (a run failing at its first step) the loss
  must fall over the trial;
- with several objectives (a GAN's, an actor-critic's: one optimizer each), whose
  losses trade off by design, every objective's loss was finite at every step and
  none diverged (more than tripled); none is compared with the loss before the trouble, which is one
  objective's of several (the generator's, in a GAN's step).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Finding, Fix, NotFix
from gradient_doctor.core.trial_start import UPDATE_REMEDIES

# The loss of a held trial may rise by at most this fraction of its size (first tenth to
# last tenth of the trial) and still count as training going on: adversarial losses
# wander, a diverging loss at least doubles.
LOSS_RISE_ALLOWED = 1.0
# A loss that goes below zero (a WGAN's critic or generator loss, a density's negative
# log-likelihood) has no floor to measure its size from: as the players trade places it
# crosses zero, and a generator's -critic(fake) rises from -0.25 to 0.46 while training
# goes well. Such a loss diverges only when it rises by more than this many times its
# size at the start (the mean magnitude of its first tenth): an order of magnitude.
SIGNED_LOSS_RISE_ALLOWED = 9.0
# A loss already below zero at the start (a Gaussian's negative log-likelihood) may fall
# on; past this many times its size at the start it fell without bound.
NEGATIVE_LOSS_FALL_ALLOWED = 100.0
# With several objectives (a GAN's), one's loss rises as another's falls: the
# discriminator's, toward its equilibrium (2 ln 2 for the standard loss) as the generator
# improves, 0.45 -> 0.92 over a trial of a patch that then trains 1500 steps well. Such a
# loss diverges only when it more than triples; a generator whose loss goes 2 -> 10 (the
# discriminator rejects every fake) has lost.
ADVERSARIAL_RISE_ALLOWED = 2.0
# ... measured from at least this size (ln 2, a binary cross-entropy at chance): a
# discriminator that starts far ahead, at 0.18, rises to 0.62 as its generator learns,
# short of its equilibrium 2 ln 2, and has not diverged.
ADVERSARIAL_SIZE_FLOOR = math.log(2.0)
# Failures of a value that drifts over training to a limit (not gradients that explode).
DRIFTS = frozenset({"forward_overflow", "forward_domain"})
# Remedies that leave the op that failed as it was, and what they change instead: for
# a value that built up over training, a trial or rerun that held shows only that it
# built up more slowly, as far as it ran.
SLOWS_ONLY = {
    "lower_learning_rate": "it acts on the updates",
    "normalize_input": "it changes the data, not the op that failed",
    "better_init": "it changes where training starts, not the op that failed",
    "batch_normalization": "it rescales the activations, not the op that failed",
}
# Per category, remedies that work around its cause rather than remove it: within a
# verdict they come after the others (clipping each value keeps a float16 optimizer's
# squares in range; the mixed policy keeps its state in float32).
WORKS_AROUND = {"optimizer_overflow": frozenset({"clip_by_value"})}
# Remedies that change what the loss measures (a squared error of standardised targets
# is in units of their variance): their trial's loss is not compared with the loss before
# the trouble, and must fall over the trial instead.
RESCALES_THE_LOSS = frozenset({"normalize_target"})
# A trial whose gradient norm was exactly zero on at least this share of its steps did
# not train: its updates left the weights where they were.
ZERO_GRADIENT_SHARE = 0.9
# A loss that must fall to show that training goes on (a trial with no loss from before
# the trouble, a patched copy rerun from the start) must fall by at least this share of
# its size: a clamp of a log of dead units' zero variance held an LSTM classifier finite
# at 0.8543 -> 0.8542 over 200 steps, every one of its dead units still dead (a model
# that learns falls by far more from its random start).
BARELY_MOVED = 0.01


@dataclass(frozen=True)
class TrialOutcome:
    """What happened when the step was run again with one remedy (or none).

    Attributes:
        remedy: the fix family tried (`FIX_FAMILIES`), or None for the baseline.
        setting: what was changed, in words (e.g. "global_clipnorm=0.41").
        steps_planned: how many steps the trial was to run.
        steps_run: how many it ran (fewer when a step failed).
        failed_at: the 0-based trial step whose loss or gradients were not finite,
            or None when every step was finite.
        losses: the loss of each finite step, in order.
        batches: which batches the trial ran on, in words.
        skipped: why the remedy could not be tried, or None when it ran.
        start: the step the trial started from (None: the failing step).
        start_reason: why it started there, in words ("" when it is the failing step).
        grad_norms: the largest global gradient norm of each finite step's updates
            (empty when the adapter did not measure it).
        objective_losses: with several objectives (one optimizer each), each one's
            loss at every finite step, in the order of the step's updates (empty
            when the adapter did not keep them apart).
        repeated_from: the 0-based trial step from which the trial ran the failing
            batch again and again to its end, or None when it ended on other batches.
    """

    remedy: str | None
    setting: str
    steps_planned: int
    steps_run: int
    failed_at: int | None
    losses: tuple[float, ...] = ()
    batches: str = "the failing batch"
    skipped: str | None = None
    start: int | None = None
    start_reason: str = ""
    grad_norms: tuple[float, ...] = ()
    objective_losses: tuple[tuple[float, ...], ...] = ()
    repeated_from: int | None = None

    @property
    def held(self) -> bool:
        """True when the trial ran all its steps, finite."""
        return self.skipped is None and self.failed_at is None and self.steps_run > 0

    def loss_trend(self, losses: Sequence[float] | None = None) -> tuple[float, float] | None:
        """Mean loss over the first and the last tenth of the trial (of `losses`, by
        default the trial's on the batches it ended on: `judged_losses`), or None."""
        finite = [
            v for v in (self.judged_losses() if losses is None else losses) if math.isfinite(v)
        ]
        if len(finite) < 2:
            return None
        window = max(1, len(finite) // 10)
        return sum(finite[:window]) / window, sum(finite[-window:]) / window

    def judged_losses(self) -> tuple[float, ...]:
        """The losses the trial is judged by: those of the failing batch repeated, where
        the trial spent at least half its steps on it at the end (a batch that failed may
        hold a loss of another size than the batches before it), else all of them."""
        start = self.repeated_from
        if start is None or start == 0 or 2 * (len(self.losses) - start) < len(self.losses):
            return self.losses
        return self.losses[start:]

    @property
    def objectives(self) -> int:
        """How many objectives the trial kept apart (1 when it kept one loss)."""
        return max(len(self.objective_losses), 1)

    def blind(self) -> str | None:
        """Why this trial cannot tell whether training goes on, or None: it could only
        run the failing batch, again and again, and on it the gradients were exactly
        zero (a batch whose loss, as the patch computes it, carries no gradient: one
        with no valid labels, say). Zero there says nothing of the other batches."""
        zeros = sum(1 for norm in self.grad_norms if norm == 0.0)
        if self.repeated_from != 0 or not self.grad_norms:
            return None
        if zeros < ZERO_GRADIENT_SHARE * len(self.grad_norms):
            return None
        return (
            "the trial could only run the failing batch again, and on it the gradients "
            f"were exactly zero at {zeros} of its {len(self.grad_norms)} steps (that batch "
            "gives no gradient as the patch computes it), so whether training goes on "
            "cannot be told there"
        )

    def learning(self, reference: float | None = None) -> bool:
        """True when the trial went on learning (`shortfall` says what that takes)."""
        return self.shortfall(reference) is None

    def shortfall(self, reference: float | None = None) -> str | None:
        """Why a finite trial does not count as training going on, in words (None: it does).

        The rule, in order: the gradients were not exactly zero on at least
        `ZERO_GRADIENT_SHARE` of the steps; with several objectives, none's loss
        rose by more than `ADVERSARIAL_RISE_ALLOWED` times its size (their losses trade
        off: none is compared with `reference`);
        with one, the loss did not diverge, and ended no worse than `reference` (the
        loss before the trouble) allows, or, where the trial ended on the failing
        batch repeated, fell on it; with no `reference` (the run failed at its first
        step) it fell over the trial. A loss diverges when it rises by more than
        `LOSS_RISE_ALLOWED` times its size, first tenth to last (a loss that goes
        below zero: `SIGNED_LOSS_RISE_ALLOWED` times its magnitude at the start).

        Args:
            reference: the loss before the trouble began, or None.
        """
        motionless = not_moving(self.grad_norms, self.losses)
        if motionless is not None:
            return motionless
        if self.objectives > 1:
            for number, losses in enumerate(self.objective_losses, 1):
                trend = self.loss_trend(losses)
                if _rival_diverged(trend, losses):
                    return (
                        f"objective {number}'s loss (of {self.objectives}, in the order of "
                        f"the step's updates) diverged ({trend[0]:.4g} -> {trend[1]:.4g})"
                    )
            return None
        trend = self.loss_trend()
        if trend is None:
            return None
        first, last = trend
        if _diverged(trend, self.judged_losses()):
            return f"the loss diverged ({first:.4g} -> {last:.4g})"
        if _ran_below_zero(trend, self.judged_losses(), self.losses, reference):
            return _BELOW_ZERO.format(first=first, last=last)
        if reference is None or not math.isfinite(reference):
            if first - last >= BARELY_MOVED * max(abs(first), 1e-12):
                return None
            fell = (
                f"barely fell over the trial ({first:.4g} -> {last:.4g}, "
                f"{100 * (first - last) / max(abs(first), 1e-12):.2g}% lower)"
                if last < first
                else f"did not fall over the trial ({first:.4g} -> {last:.4g})"
            )
            return (
                f"the loss {fell}, and with no loss from before the trouble to compare with, "
                f"only a loss falling by {100 * BARELY_MOVED:.0f}% or more shows the training "
                "went on"
            )
        if last - reference <= LOSS_RISE_ALLOWED * max(abs(reference), 1e-12):
            return None
        if self._fell_on_the_failing_batch():
            return None
        return f"the loss ended worse than the {reference:.4g} it had before the trouble began"

    def _fell_on_the_failing_batch(self) -> bool:
        """True when the trial ended on the failing batch repeated, and the loss on it
        fell over those steps (first tenth to last)."""
        if self.repeated_from is None:
            return False
        trend = self.loss_trend(self.losses[self.repeated_from :])
        return trend is not None and trend[1] < trend[0]

    def judged_by(self, reference: float | None = None) -> str:
        """The learning test a held trial passed, in words, for its evidence."""
        if self.objectives > 1:
            return (
                f"judged over its {self.objectives} objectives: each one's loss finite at "
                "every step and none diverging, none compared with the loss before the "
                "trouble (that is one objective's of several, and adversarial losses trade "
                "off)"
            )
        if reference is None or not math.isfinite(reference):
            gradients = " and the gradients were not zero" if self.grad_norms else ""
            return (
                f"the loss fell by {100 * BARELY_MOVED:.0f}% or more{gradients}, as a trial "
                "with no loss from before the trouble to compare with must show"
            )
        trend = self.loss_trend()
        if trend is not None and trend[1] - reference > LOSS_RISE_ALLOWED * max(
            abs(reference), 1e-12
        ):
            return (
                f"the loss ended above the {reference:.4g} it had before the trouble, on "
                "the failing batch repeated, which the earlier batches do not compare "
                "with; on it the loss fell ({:.4g} -> {:.4g})".format(
                    *self.loss_trend(self.losses[self.repeated_from :])
                )
            )
        return f"the loss ended no worse than the {reference:.4g} it had before the trouble"


def diverged(losses: Sequence[float], whose: str = "the loss", alone: bool = True) -> str | None:
    """ "the loss diverged (1.57 -> 15.6)" when `losses` rose by more than
    `LOSS_RISE_ALLOWED` times their size, first tenth to last, or, `alone` (the run's
    one loss, not one objective of several), from its first value to its last tenth
    (a loss that blew up within its first tenth and stayed there: 1.0, 843, 10940, ...,
    ~9000 has a first tenth as high as its last), or fell below zero without bound (the
    tests a held trial passes, for a loss seen elsewhere: a patched copy rerun from the
    start); else None. `whose` names the loss ("objective 1's loss"). Adversarial
    objectives (not `alone`) may rise from their first value as their players learn."""
    trend = TrialOutcome(None, "", len(losses), len(losses), None, tuple(losses)).loss_trend()
    if alone and _diverged(trend, losses) or not alone and _rival_diverged(trend, losses):
        return f"{whose} diverged ({trend[0]:.4g} -> {trend[1]:.4g})"
    if alone and trend is not None and _diverged((_first_loss(losses), trend[1]), losses):
        return (
            f"{whose} ended far above where the run started ({_first_loss(losses):.4g} at its "
            f"first step -> {trend[1]:.4g} over its last tenth): it blew up in its first "
            "steps and never came back"
        )
    if alone and _ran_below_zero(trend, losses, start=_first_loss(losses)):
        return _BELOW_ZERO.format(first=trend[0], last=trend[1])
    return None


# A loss that started at or above zero and ended below minus `SIGNED_LOSS_RISE_ALLOWED`
# times its starting size: a cross-entropy cannot go below zero at all, and a loss that
# may (a Poisson NLL without its constant: 0.84 -> -2.4 as it trains) does not run an
# order of magnitude below; the patch changed what it computes (a clamp of a hand-
# written log-sum-exp's normaliser alone lets the loss fall to -18675 while "falling").
_BELOW_ZERO = (
    "the loss fell below zero without bound ({first:.4g} -> {last:.4g}): what the patched "
    "code computes is no longer the loss it was"
)


def _first_loss(losses: Sequence[float]) -> float:
    """The first finite loss: the run's, before any update could move it."""
    return next(v for v in losses if math.isfinite(v))


def _first_tenth(losses: Sequence[float]) -> list[float]:
    """The finite losses of the first tenth (at least one), as `loss_trend` averages."""
    finite = [v for v in losses if math.isfinite(v)]
    return finite[: max(1, len(finite) // 10)]


def _ran_below_zero(
    trend: tuple[float, float] | None,
    losses: Sequence[float],
    trial_losses: Sequence[float] = (),
    start: float | None = None,
) -> bool:
    """True when a loss that started at or above zero ended, over its last tenth, below
    minus `SIGNED_LOSS_RISE_ALLOWED` times its starting size; or one that started below
    zero, below minus `NEGATIVE_LOSS_FALL_ALLOWED` times it.

    `losses` are those judged (`trend` their first and last tenth's means);
    `trial_losses`, where the judged ones are the trial's tail (the failing batch
    repeated), all of the trial's. `start`, when known, is the loss before any of them:
    the run's before the trouble began (a trial), or its first (a rerun from the start).
    The loss started at or above zero when `start` did, or, with no `start`, when its
    first tenths never went below it: a patch that turned the loss into one without a
    floor may take it to -1.3e7 on its first step, after a run that was at 9.3 (and on,
    by orders of magnitude, to -7e19). The starting size is the largest of `start`'s
    magnitude and, for each first tenth, its mean's magnitude and how far the loss moved
    within it (a loss that runs away keeps growing past any of them): a likelihood that nears zero
    before the judged tail begins (a learned noise variance shrinking on clean data, 0.42
    at the trial's start, 0.07 at its tail's, then on to -1.2) has a mean near zero
    there, but not a small size.
    """
    if trend is None:
        return False
    starts = [_first_tenth(losses)] + ([_first_tenth(trial_losses)] if trial_losses else [])
    known = start is not None and math.isfinite(start)
    below = (start < 0) if known else min(min(tenth) for tenth in starts) < 0
    sizes = [max(abs(sum(tenth) / len(tenth)), max(tenth) - min(tenth)) for tenth in starts]
    size = max(abs(start) if known else 0.0, *sizes)
    # A loss below zero from the start (a density's likelihood) may fall on, though not
    # by orders of magnitude: a clamp of a VAE's exp(log_var) left its KL term without a
    # floor, -3.1e9 -> -5.3e13 as the log-variance grew.
    allowed = NEGATIVE_LOSS_FALL_ALLOWED if below else SIGNED_LOSS_RISE_ALLOWED
    return trend[1] < -allowed * max(size, 1e-12)


def not_moving(grad_norms: Sequence[float], losses: Sequence[float] = ()) -> str | None:
    """Why training with these global gradient norms did not move the weights, in words
    (exactly zero at `ZERO_GRADIENT_SHARE` of the steps or more), or None. With the
    steps' `losses` (one per norm), a zero gradient where the loss is exactly 0 is a loss
    at its floor (a hinge or triplet margin met), not a cut path: it does not count."""
    paired = list(zip(grad_norms, losses)) if len(losses) == len(grad_norms) else []
    zeros = sum(1 for norm in grad_norms if norm == 0.0)
    if paired and zeros and all(loss == 0.0 for norm, loss in paired if norm == 0.0):
        return None
    if not grad_norms or zeros < ZERO_GRADIENT_SHARE * len(grad_norms):
        return None
    return (
        f"the gradients were exactly zero at {zeros} of its {len(grad_norms)} steps, so its "
        "updates did not move the weights"
    )


def _rival_diverged(trend: tuple[float, float] | None, losses: Sequence[float]) -> bool:
    """`_diverged` for one objective of several (a GAN player's): by more than
    `ADVERSARIAL_RISE_ALLOWED` times its size, at least `ADVERSARIAL_SIZE_FLOOR`."""
    return _diverged(trend, losses, ADVERSARIAL_RISE_ALLOWED, ADVERSARIAL_SIZE_FLOOR)


def _diverged(
    trend: tuple[float, float] | None,
    losses: Sequence[float],
    allowed: float = LOSS_RISE_ALLOWED,
    floor: float = 1e-12,
) -> bool:
    """True when a loss (`trend`: the means of the first and last tenth of `losses`)
    rose by more than `allowed` times its size (at least `floor`), or, where `losses` go
    below zero, by more than `SIGNED_LOSS_RISE_ALLOWED` times their magnitude at the
    start."""
    if trend is None:
        return False
    first, last = trend
    if min(v for v in losses if math.isfinite(v)) >= 0:
        return last - first > allowed * max(abs(first), floor)
    start = _first_tenth(losses)
    size = max(abs(first), sum(abs(v) for v in start) / len(start), 1e-12)
    return last - first > SIGNED_LOSS_RISE_ALLOWED * size


def describe(outcome: TrialOutcome, start_step: int | None, phase: str | None = None) -> str:
    """One sentence of evidence: what was run, from where, and what happened.

    `start_step` is the failing step, used when the outcome says no start of its own.
    """
    if outcome.skipped is not None:
        return f"not tried: {outcome.skipped}"
    start_step = outcome.start if outcome.start is not None else start_step
    origin = "" if start_step is None else f" from the state before step {start_step}"
    if outcome.start_reason:
        origin += f" ({outcome.start_reason})"
    setting = f" with {outcome.setting}" if outcome.setting else ""
    if outcome.failed_at is not None:
        text = (
            f"tried{setting}{origin} on {outcome.batches}: the loss or gradients were "
            f"not finite again at trial step {outcome.failed_at + 1} of "
            f"{outcome.steps_planned}"
        )
        if outcome.failed_at == 0 and phase == "forward" and outcome.remedy in UPDATE_REMEDIES:
            text += (
                " (its forward pass ran on the saved weights, which this remedy changes "
                "only from the first update on)"
            )
        return text
    trend = outcome.loss_trend()
    loss = ""
    if outcome.objectives > 1:
        trends = [outcome.loss_trend(losses) for losses in outcome.objective_losses]
        loss = f"; the losses of its {outcome.objectives} objectives " + ", ".join(
            f"{t[0]:.4g} -> {t[1]:.4g}" for t in trends if t is not None
        )
    elif trend is not None:
        first, last = trend
        fell = first - last >= BARELY_MOVED * max(abs(first), 1e-12)
        direction = "falling" if fell else "barely falling" if last < first else "not falling"
        loss = f"; loss {first:.4g} -> {last:.4g} ({direction})"
    return (
        f"tried{setting}{origin} on {outcome.batches}: all {outcome.steps_run} steps finite{loss}"
    )


def judge(
    finding: Finding,
    baselines: TrialOutcome | Mapping[int | None, TrialOutcome],
    outcomes: Sequence[TrialOutcome],
    reference_loss: float | None = None,
) -> Finding:
    """The finding with each tried fix marked verified or not, with its evidence.

    A fix is `verified: true` when its patch was trialed and every step ran finite
    with the loss not blowing up (and ending no worse than `reference_loss`, the loss
    before the trouble, allows), and the unchanged step, run from the same start,
    failed again (so the trial can tell); false when it failed too; null, with the
    reason, when the trial could not tell or the fix has no patch to prove.
    Not-fixes that were tried get their evidence as well.

    Args:
        finding: the diagnosed problem.
        baselines: the unchanged step's trial, or one per start step (the key is
            an outcome's `start`).
        outcomes: one trial per remedy tried.
        reference_loss: the loss before the trouble began, or None.
    """
    start = finding.step
    if isinstance(baselines, TrialOutcome):
        baselines = {baselines.start: baselines}
    by_remedy = {o.remedy: o for o in outcomes}
    phase = finding.phase
    drift = _may_have_built_up(finding)

    def baseline_of(outcome: TrialOutcome | None) -> TrialOutcome:
        key = None if outcome is None else outcome.start
        return baselines.get(key) or next(iter(baselines.values()))

    def reference(remedy: str) -> float | None:
        return None if remedy in RESCALES_THE_LOSS else reference_loss

    fixes = tuple(
        _judged_fix(
            fix,
            (outcome := by_remedy.get(fix.family)),
            baseline_of(outcome),
            start,
            phase,
            reference(fix.family),
            drift,
        )
        for fix in finding.fixes
    )
    not_fixes, promoted = [], []
    for item in finding.not_fixes:
        outcome = by_remedy.get(item.remedy)
        baseline = baseline_of(outcome)
        loss_before = reference(item.remedy)
        if _helped(outcome, baseline, loss_before):
            # The trial says it helps after all: it is a fix, with the trial's verdict.
            fix = item.fix or Fix(item.remedy, f"Try {item.remedy.replace('_', ' ')}", "")
            promoted.append(_judged_fix(fix, outcome, baseline, start, phase, loss_before, drift))
        else:
            not_fixes.append(_judged_not_fix(item, outcome, baseline, start, phase, loss_before))
    fixes = _compared(fixes + tuple(promoted), by_remedy, start)
    judged = dataclasses.replace(finding, fixes=fixes, not_fixes=tuple(not_fixes))
    return ranked(judged)


# A verified fix whose trial's loss ended more than this many times the best verified
# fix's, tried from the same start for as many steps, is not verified: it kept the
# values finite but left training far behind (gradients clipped to a crawl, 5.8e22 where
# a better initialisation reached 0.046). One more than `BEHIND_RANKED` times behind
# ranks after the others.
FAR_BEHIND = 100.0
BEHIND_RANKED = 10.0


def _compared(
    fixes: tuple[Fix, ...], by_remedy: Mapping[str, TrialOutcome], failing_step: int | None
) -> tuple[Fix, ...]:
    """The verified fixes' trials compared with each other: one whose loss ended far
    behind the best's is not verified, one behind ranks after the rest (the order
    within each group kept). Only trials of one loss, above zero, from the same start
    and as long as each other are compared, and none whose patch computes the loss in
    other units (standardised targets). A trial from the failing step (its `start`
    None) and one from that step's number start from the same saved state (a clamp
    tried from step 0 where it failed, standardised features from the start of
    training, step 0 too)."""
    ended = {}
    for fix in fixes:
        outcome = by_remedy.get(fix.family)
        if fix.verified is not True or outcome is None or outcome.objectives > 1:
            continue
        if fix.family in RESCALES_THE_LOSS:
            continue
        losses = [v for v in outcome.judged_losses() if math.isfinite(v)]
        if losses and min(losses) > 0:
            window = max(1, len(losses) // 10)
            start = outcome.start if outcome.start is not None else failing_step
            key = (start, outcome.steps_run, outcome.repeated_from)
            ended[fix.family] = (key, sum(losses[-window:]) / window, outcome.setting)
    compared = []
    for fix in fixes:
        behind = 1.0
        if fix.family in ended:
            key, loss, _ = ended[fix.family]
            rivals = [(v, f, s) for f, (k, v, s) in ended.items() if k == key and f != fix.family]
            best = min(rivals, default=None)
            if best is not None and loss > FAR_BEHIND * best[0]:
                fix = dataclasses.replace(
                    fix,
                    verified=False,
                    evidence=(
                        f"{fix.evidence}; but its loss ended at {loss:.4g}, where "
                        f"{best[1]} ({best[2]}), tried from the same start on the same "
                        f"batches, reached {best[0]:.4g}: the values stayed finite, but "
                        "training was left far behind"
                    ),
                )
            elif best is not None:
                behind = loss / best[0]
        compared.append((behind > BEHIND_RANKED, fix))
    return tuple(fix for _, fix in sorted(compared, key=lambda pair: pair[0]))


def ranked(finding: Finding) -> Finding:
    """The finding with its verified fixes first, then the untried, then those that failed.

    Within each group the rules' order stands: the fix that removes the cause (the op
    rewritten, the data standardised) before the one that works around it; but for a
    value that built up over training (`DRIFTS`), a fix that leaves the op that failed
    as it was (`SLOWS_ONLY`) comes after those that change it: what held in its trial
    may only have built up more slowly (a lower rate, standardised features under a
    softmax whose logits keep growing), where a changed op cannot fail that way; and a
    fix that works around the category's cause (`WORKS_AROUND`) after one that removes it.
    """
    order = {True: 0, None: 1, False: 2}
    drift = _may_have_built_up(finding)
    around = WORKS_AROUND.get(finding.category, frozenset())

    def rank(fix: Fix) -> tuple[int, bool, bool]:
        return order[fix.verified], drift and fix.family in SLOWS_ONLY, fix.family in around

    return dataclasses.replace(finding, fixes=tuple(sorted(finding.fixes, key=rank)))


def _may_have_built_up(finding: Finding) -> bool:
    """Whether the value that failed may have built up over training (`DRIFTS`): not at
    the first step, which no update came before (a log of 0 from the initial weights)."""
    return finding.category in DRIFTS and finding.step != 0


def _helped(
    outcome: TrialOutcome | None, baseline: TrialOutcome, reference_loss: float | None
) -> bool:
    """True when a trial held, learning, where the unchanged step failed again."""
    return (
        outcome is not None
        and outcome.held
        and outcome.learning(reference_loss)
        and _failed(baseline)
    )


def _motionless_too(outcome: TrialOutcome, baseline: TrialOutcome) -> bool:
    """Both the remedy's trial and the unchanged step's had exactly zero gradients (a
    step the trial cannot run whole: a loop that applies gradients it accumulated)."""
    return (
        not_moving(outcome.grad_norms) is not None
        and baseline.failed_at is None
        and not_moving(baseline.grad_norms) is not None
    )


def _failed(baseline: TrialOutcome) -> bool:
    """The unchanged step failed again within the trial: a non-finite step, or a loss
    that diverged while finite (a GRU's from 1.06e5 to 4.2e6: it goes on to fail)."""
    return baseline.failed_at is not None or _diverged_trend(baseline) is not None


def _diverged_trend(baseline: TrialOutcome) -> tuple[float, float] | None:
    """The unchanged step's (first, last) loss when it stayed finite and diverged."""
    if baseline.failed_at is not None or not baseline.held or baseline.objectives > 1:
        return None
    trend = baseline.loss_trend()
    if trend is None or not _diverged(trend, baseline.judged_losses()):
        return None
    return trend


def _baseline_note(baseline: TrialOutcome, start: int | None) -> str:
    if baseline.failed_at is not None:
        return f"unchanged, it failed again at trial step {baseline.failed_at + 1}"
    diverged = _diverged_trend(baseline)
    if diverged is not None:
        return (
            f"unchanged, it stayed finite for {baseline.steps_run} steps but its loss "
            f"diverged ({diverged[0]:.4g} -> {diverged[1]:.4g})"
        )
    return f"unchanged, it also stayed finite for {baseline.steps_run} steps"


def _judged_fix(
    fix: Fix,
    outcome: TrialOutcome | None,
    baseline: TrialOutcome,
    start: int | None,
    phase: str | None,
    reference_loss: float | None,
    drift: bool = False,
) -> Fix:
    """The fix with its trial's verdict. `drift`: the failure is a value that built up
    in the forward pass (a remedy on the updates then slows it, and may only delay it)."""
    if outcome is None:
        if fix.verified is None and not fix.evidence:  # no trial could run it: say why
            return dataclasses.replace(fix, evidence=_NOT_TRIED if not fix.patch else "not tried")
        return fix
    base_note = _baseline_note(baseline, start)
    evidence = describe(outcome, start, phase)
    if outcome.skipped is not None:
        return dataclasses.replace(fix, verified=None, evidence=evidence)
    shortfall = outcome.shortfall(reference_loss) if outcome.held else None
    # A clamp that changes many of the op's values zeroes their gradient itself: then
    # the zero gradients of the failing batch are the patch's doing, not the batch's.
    blind = outcome.blind() if outcome.held and fix.clamped_share is None else None
    if _ruined_before(outcome, fix.family, start, phase):
        verified = None  # the weights it would have protected were already ruined
        evidence += f" ({base_note}); {_NO_EARLIER_STATE}, so this trial cannot tell"
    elif outcome.held and not _failed(baseline):
        verified = None  # the unchanged step held as well: the trial cannot tell
        evidence += f" ({base_note}, so this trial cannot tell)"
    elif blind is not None:  # held, where the unchanged step failed
        verified = None
        evidence += f" ({base_note}); but {blind}: this trial cannot tell"
    elif outcome.held and shortfall is None and not fix.patch:
        verified = None  # what held was the remedy, not a patch the user can apply
        evidence += f" ({base_note}); no patch of your file could be written for it"
    else:
        verified = outcome.held and shortfall is None
        evidence += f" ({base_note})"
        if shortfall is not None:
            evidence += f"; but {shortfall}, so training did not go on well"
        elif verified:
            evidence += f"; {outcome.judged_by(reference_loss)}"
        if verified and drift and _slows_a_build_up(fix.family, outcome, start):
            evidence += (
                f"; it acts on the updates, and the trouble built up from step "
                f"{outcome.start} to {start}: it may only delay the failure past this window"
            )
        if verified and fix.clamped_share is not None:
            verified = None  # held, but what it held is a rewritten computation
            evidence += clamp_caveat(fix)
    return dataclasses.replace(fix, verified=verified, evidence=evidence)


# Why a fix with no patch of the user's files is not tried (its code is advice: an
# initialisation, a normalisation layer, to write where the model is built).
_NOT_TRIED = "not tried: no patch of your files to run (its code shows what to write)"
# Why a remedy on the updates says nothing by failing at its trial's first step.
_NO_EARLIER_STATE = (
    "it failed in the first forward pass, before any update it changes, on weights the "
    "updates before its start had already moved (no earlier state that was still sound "
    "was kept)"
)


def _ruined_before(
    outcome: TrialOutcome, family: str, start: int | None, phase: str | None
) -> bool:
    """True when a remedy on the updates failed at its trial's first step in the forward
    pass, the step itself failing in its forward pass after earlier updates: that first
    pass ran on the weights the trial started from, left by updates the remedy never
    touched (tried from the failing step, no earlier state kept; or from a state the
    updates before it had already ruined, a GAN's critic after its first update), so the
    failure is no evidence against it (its patched copy, rerun from the start, can tell)."""
    return (
        family in UPDATE_REMEDIES
        and phase == "forward"
        and outcome.failed_at == 0
        and start is not None
        and start > 0
    )


def clamp_caveat(fix: Fix) -> str:
    """Why a clamp that changes many of the failing step's values, and held, is not
    verified (by a trial or a rerun alike): what held is another computation."""
    return (
        f"; but its clamp changes {fix.clamped_share:.0%} of the values at the failing step "
        "(their gradient is 0 there): it rewrites what the code computes, and the loss "
        "that fell is the rewritten one, so a trial cannot verify it is what you meant"
    )


def _slows_a_build_up(family: str, outcome: TrialOutcome, failing: int | None) -> bool:
    """True for a remedy on the updates tried from well before the failing step."""
    started = outcome.start
    return (
        family in UPDATE_REMEDIES
        and started is not None
        and failing is not None
        and failing - started > 1
    )


def _judged_not_fix(
    item: NotFix,
    outcome: TrialOutcome | None,
    baseline: TrialOutcome,
    start: int | None,
    phase: str | None,
    reference_loss: float | None,
) -> NotFix:
    """The not-fix with its trial's evidence; an expectation nobody tried says so. A
    trial that stayed finite says why it still did not help: training did not go on
    well, or the unchanged step stayed finite too."""
    if outcome is None or outcome.skipped is not None:
        if item.structural or item.evidence:
            return item
        reason = f": {outcome.skipped}" if outcome is not None else ""
        return dataclasses.replace(item, evidence=f"not tried{reason}")
    evidence = describe(outcome, start, phase)
    if not item.structural and _ruined_before(outcome, item.remedy, start, phase):
        return dataclasses.replace(
            item, evidence=f"{evidence}; {_NO_EARLIER_STATE}, so this trial cannot tell"
        )
    if outcome.held:
        shortfall = outcome.shortfall(reference_loss)
        if shortfall is not None and _motionless_too(outcome, baseline):
            evidence += (
                f"; but {shortfall}, and so were the unchanged step's: the trial ran nothing "
                "that computes the gradients, so it cannot tell"
            )
        elif shortfall is not None:
            evidence += f"; but {shortfall}, so training did not go on well"
        elif not _failed(baseline):
            evidence += f" ({_baseline_note(baseline, start)}, so this trial cannot tell)"
    return dataclasses.replace(item, evidence=evidence)
