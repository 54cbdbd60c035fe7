"""A log of a softmax written on the user's line gets the exact log_softmax first, spelled
in the user's namespace with the softmax's own arguments, before the clamp of the log's
input, for a forward -inf and for the backward 1 / x alike; a log of anything else, or of
a softmax that is only part of its argument, gets no such rewrite."""

import dataclasses

import pytest

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rewrites.log_softmax import log_softmax

TORCH_LINE = "logp = torch.log(F.softmax(logits, dim=1))"


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        (TORCH_LINE, "logp = F.log_softmax(logits, dim=1)"),
        ("logp = torch.log(torch.softmax(x, 1))", "logp = torch.log_softmax(x, 1)"),
        ("logp = torch.log(x.softmax(dim=-1))", "logp = x.log_softmax(dim=-1)"),
        ("lp = tf.math.log(tf.nn.softmax(z, axis=-1))", "lp = tf.nn.log_softmax(z, axis=-1)"),
        ("lp = keras.ops.log(keras.ops.softmax(z))", "lp = keras.ops.log_softmax(z)"),
        (
            "return -(y * torch.log(F.softmax(h @ w, dim=1))).sum(1).mean()",
            "return -(y * F.log_softmax(h @ w, dim=1)).sum(1).mean()",
        ),
    ],
)
def test_the_log_of_a_softmax_becomes_log_softmax_in_the_users_namespace(code, rewritten):
    fix = log_softmax(code, "Log")
    assert fix.family == "library_function"
    assert fix.code == rewritten and fix.rewrite == (rewritten,)


@pytest.mark.parametrize(
    "code",
    [
        "logp = torch.log(probs)",
        "logp = torch.log(F.softmax(logits, dim=1) + 1e-9)",  # the epsilon is the user's
        "logp = torch.log(F.softmax(logits, dim=1)[:, 0])",
        "logp = torch.log2(F.softmax(logits, dim=1))",
        "",
    ],
)
def test_a_log_of_anything_but_a_whole_softmax_is_left_to_the_other_fixes(code):
    assert log_softmax(code, "Log") is None


def test_only_a_log_is_rewritten():
    assert log_softmax("y = torch.log1p(F.softmax(x, dim=1))", "Log1p") is None


def test_a_forward_log_of_a_softmax_gets_log_softmax_before_the_clamp(
    make_evidence, make_stats, families
):
    evidence = make_evidence(
        op="Log",
        code="lp = tf.math.log(tf.nn.softmax(z, axis=-1))",
        inputs=(make_stats(min=0.0, max=1.0, zeros=3),),
        outputs=(make_stats(min=-5.0, max=0.0, inf=3),),
        feeding_ops=frozenset({"Softmax"}),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert families(diagnosis)[:2] == ["library_function", "safe_log"]
    assert diagnosis.fixes[0].code == "lp = tf.nn.log_softmax(z, axis=-1)"


def _backward(make_evidence, make_stats, code):
    evidence = make_evidence(
        op="RealDiv",
        code=code,
        phase="backward",
        gradient_of="Log",
        inputs=(make_stats(min=-0.01, max=0.0), make_stats(min=0.0, max=1.0, zeros=1)),
        outputs=(make_stats(min=-1e8, max=0.0, nan=1),),
    )
    origin = evidence.origin
    source = SourceLine("train.py", 3, code, column=code.index("torch.log"))
    return dataclasses.replace(evidence, origin=dataclasses.replace(origin, source=source))


def test_the_backward_singularity_of_a_log_of_a_softmax_is_patched_to_log_softmax(
    make_evidence, make_stats, families, tmp_path
):
    evidence = _backward(make_evidence, make_stats, TORCH_LINE)
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "backward_singularity"
    assert families(diagnosis) == ["library_function", "safe_log"]
    (tmp_path / "train.py").write_text(f"import torch\n\n{TORCH_LINE}\n")
    placed = place_fixes(diagnosis.finding(evidence), str(tmp_path)).fixes
    assert "+logp = F.log_softmax(logits, dim=1)\n" in placed[0].patch
    assert placed[1].patch is not None  # the clamp is still offered, after it


def test_a_backward_log_of_a_plain_value_keeps_its_clamp_alone(make_evidence, make_stats, families):
    diagnosis = diagnose(_backward(make_evidence, make_stats, "y = torch.log(p)"))
    assert families(diagnosis) == ["safe_log"]
