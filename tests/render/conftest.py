"""Hand-built findings and reports shared by the renderer tests (no TensorFlow)."""

import dataclasses

import pytest

from gradient_doctor.core.findings import (
    BreakPoint,
    Disconnected,
    Finding,
    Fix,
    Headroom,
    NotFix,
    Origin,
    SourceLine,
    TensorStats,
)
from gradient_doctor.core.report import Report

EXP_EXPLANATION = "The input to Exp reached 712.4; float32 exp overflows above 88.72."
SQRT_EXPLANATION = "Sqrt's gradient 0.5/sqrt(x) is infinite where x is 0; 3 inputs were 0."


def exp_overflow_finding(**changes):
    """A forward Exp overflow at step 1830 on train.py:42, with one fix and one not-fix."""
    finding = Finding(
        category="forward_overflow",
        step=1830,
        phase="forward",
        origin=Origin(
            op="Exp",
            op_name="message_passing/Exp",
            layer="message_passing",
            source=SourceLine("train.py", 42, "w = tf.exp(scores)"),
            gradient_of=None,
            inputs=(TensorStats("float32", (32, 8), -3.1, 712.4, nan=0, inf=0, zeros=0),),
            outputs=(TensorStats("float32", (32, 8), 0.04, 3.0e38, nan=0, inf=17, zeros=0),),
        ),
        explanation=EXP_EXPLANATION,
        not_fixes=(
            NotFix(
                "gradient_clipping", "the overflow happens in the forward pass, before any gradient"
            ),
        ),
        fixes=(
            Fix(
                family="stable_softmax",
                title="Subtract the row maximum before exp",
                code="w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))",
                verified=True,
                evidence="replayed 200 steps from step 1829: all finite",
                patch=STABLE_SOFTMAX_PATCH,
            ),
        ),
    )
    return dataclasses.replace(finding, **changes)


STABLE_SOFTMAX_PATCH = (
    "--- a/train.py\n+++ b/train.py\n@@ -42 +42 @@\n-    w = tf.exp(scores)\n"
    "+    w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))\n"
)


def sqrt_grad_finding(**changes):
    """A backward SqrtGrad singularity (gradient of Sqrt) at step 7 on critic.py:12."""
    finding = Finding(
        category="backward_singularity",
        step=7,
        phase="backward",
        origin=Origin(
            op="SqrtGrad",
            op_name="gradient_tape/critic/norm/SqrtGrad",
            layer="critic",
            source=SourceLine("critic.py", 12, "    norm = tf.norm(grads, axis=1)"),
            gradient_of="Sqrt",
            inputs=(
                TensorStats("float32", (None,), 0.0, 4.5, nan=0, inf=0, zeros=3),
                TensorStats("float32", (None,), -1.0, 1.0, nan=0, inf=0, zeros=0),
            ),
            outputs=(TensorStats("float32", (None,), None, None, nan=0, inf=3, zeros=0),),
        ),
        explanation=SQRT_EXPLANATION,
        not_fixes=(NotFix("lower_learning_rate", "the gradient is infinite at any step size"),),
        fixes=(
            Fix(
                family="safe_norm",
                title="Take the norm with an epsilon inside the square root",
                code="norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1) + 1e-12)\n",
            ),
        ),
    )
    return dataclasses.replace(finding, **changes)


def headroom_warning(**changes):
    """An early warning: Exp's input at 61.3 of its 88.72 limit, expected at step 140."""
    finding = exp_overflow_finding(
        category="forward_overflow",
        step=12,
        explanation="The input to Exp grows by about 2 per step.",
        not_fixes=(),
        fixes=(),
        forecast_step=140,
        headroom=Headroom(limit=88.72, value=61.3),
    )
    return dataclasses.replace(finding, **changes)


def disconnected_finding(**changes):
    """Every generator variable gets no gradient: the path breaks at ArgMax on gan.py:88."""
    finding = Finding(
        category="disconnected_gradients",
        step=0,
        phase=None,
        origin=None,
        explanation="ArgMax has no gradient, so nothing reaches the generator.",
        disconnected=Disconnected(
            variables=("generator/dense/kernel", "generator/dense/bias"),
            all=True,
            break_point=BreakPoint("ArgMax", SourceLine("gan.py", 88, "tokens = tf.argmax(p, -1)")),
        ),
        fixes=(Fix("gumbel_softmax", "Sample with Gumbel-softmax", "tokens = gumbel(p)"),),
    )
    return dataclasses.replace(finding, **changes)


@pytest.fixture
def exp_problem():
    return exp_overflow_finding()


@pytest.fixture
def sqrt_problem():
    return sqrt_grad_finding()


@pytest.fixture
def warning():
    return headroom_warning()


@pytest.fixture
def disconnected_problem():
    return disconnected_finding()


@pytest.fixture
def make_finding():
    """Build a finding by kind ("exp", "sqrt", "warning", "disconnected") with changes."""
    factories = {
        "exp": exp_overflow_finding,
        "sqrt": sqrt_grad_finding,
        "warning": headroom_warning,
        "disconnected": disconnected_finding,
    }
    return lambda kind, **changes: factories[kind](**changes)


@pytest.fixture
def problem_report(exp_problem, sqrt_problem, warning):
    return Report(
        script="train.py",
        steps_watched=1831,
        problems=(exp_problem, sqrt_problem),
        warnings=(warning,),
    )


@pytest.fixture
def healthy_report():
    return Report(script="train.py", steps_watched=500)
