"""The log of a sigmoid, or of one minus it, rewritten as log_sigmoid of the logit."""

from dataclasses import replace

import pytest

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge import diagnose

SIGMOID_LINE = 41  # the origin's (the log's) line is 42 in the factory


def _log_evidence(make_evidence, make_stats, code, sigmoid_line=None):
    evidence = make_evidence(
        op="Log",
        code=code,
        inputs=(make_stats(min=0.0, max=0.18, zeros=1),),
        outputs=(make_stats(min=-5.0, max=-0.2, inf=1),),
        feeding_ops=frozenset({"Sigmoid", "Sub"}),
    )
    if sigmoid_line is None:
        return evidence
    made = OpCall("Sigmoid", SourceLine("train.py", SIGMOID_LINE, sigmoid_line), ())
    return replace(evidence, sigmoid_input=made)


def _from_logits(diagnosis):
    return next(fix for fix in diagnosis.fixes if fix.family == "from_logits")


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        (
            "d_loss = -tf.reduce_mean(tf.math.log(1.0 - tf.sigmoid(d(fake))))",
            "d_loss = -tf.reduce_mean(tf.math.log_sigmoid(-d(fake)))",
        ),
        (
            "loss = -torch.log(1 - torch.sigmoid(a + b)).mean()",
            "loss = -torch.nn.functional.logsigmoid(-(a + b)).mean()",
        ),
        (
            "loss = -F.log(F.sigmoid(z)).mean()",
            "loss = -F.logsigmoid(z).mean()",
        ),
        (
            "loss = -ops.mean(ops.log(ops.sigmoid(z)))",
            "loss = -ops.mean(ops.log_sigmoid(z))",
        ),
    ],
)
def test_a_sigmoid_inside_the_log_is_rewritten_on_the_line(
    make_evidence, make_stats, code, rewritten
):
    fix = _from_logits(diagnose(_log_evidence(make_evidence, make_stats, code)))
    assert fix.rewrite == (rewritten,)
    assert fix.edits == ()


def test_a_sigmoid_assigned_on_an_earlier_line_keeps_its_name_for_the_logit(
    make_evidence, make_stats, families
):
    code = "d_loss = -tf.reduce_mean(tf.math.log(p_real) + tf.math.log(1.0 - p_fake))"
    evidence = _log_evidence(
        make_evidence, make_stats, code, "p_fake = tf.sigmoid(self.discriminator(fake))"
    )
    start = code.index("tf.math.log(1.0")  # the replay's op is the second log
    source = replace(evidence.origin.source, column=start, end_column=len(code) - 1)
    evidence = replace(evidence, origin=replace(evidence.origin, source=source))
    diagnosis = diagnose(evidence)
    fix = _from_logits(diagnosis)
    assert fix.rewrite == (
        "d_loss = -tf.reduce_mean(tf.math.log(p_real) + tf.math.log_sigmoid(-p_fake_logits))",
    )
    (edit,) = fix.edits
    assert (edit.line, edit.end_line) == (SIGMOID_LINE, SIGMOID_LINE)
    assert edit.new_lines == (
        "p_fake_logits = self.discriminator(fake)",
        "p_fake = tf.sigmoid(p_fake_logits)",
    )
    assert edit.old_lines == ("p_fake = tf.sigmoid(self.discriminator(fake))",)
    assert families(diagnosis)[0] == "from_logits"  # exact: first, before the clamps


@pytest.mark.parametrize(
    "sigmoid_line",
    [
        None,  # the sigmoid's line unknown
        "q = tf.sigmoid(z)",  # another name
        "p = 0.5 * tf.sigmoid(z)",  # not the sigmoid as a whole
        "p = self.act(z)",  # a module's call: not known to be a sigmoid by its text
    ],
)
def test_lines_of_another_shape_get_the_generic_advice(make_evidence, make_stats, sigmoid_line):
    code = "loss = -tf.reduce_mean(tf.math.log(p))"
    fix = _from_logits(diagnose(_log_evidence(make_evidence, make_stats, code, sigmoid_line)))
    assert fix.rewrite == ()
    assert "BinaryCrossentropy(from_logits=True)" in fix.code


def test_the_other_logs_of_the_same_probability_are_rewritten_with_it(make_evidence, make_stats):
    # A head's log-probabilities of both classes, from one sigmoid (lines 40 to 42); the
    # generator's log of a new `p` after the origin is another sigmoid's: left alone.
    code = "log_q = torch.log(1 - p)"
    evidence = _log_evidence(make_evidence, make_stats, code)
    made = OpCall("Sigmoid", SourceLine("train.py", 40, "p = torch.sigmoid(self.linear(h))"), ())
    before = OpCall("Log", SourceLine("train.py", 41, "log_p = torch.log(p)"), ())
    after = OpCall("Log", SourceLine("train.py", 50, "g_loss = -torch.log(p).mean()"), ())
    evidence = replace(evidence, sigmoid_input=made, same_op_calls=(before, after))
    fix = _from_logits(diagnose(evidence))
    assert fix.rewrite == ("log_q = torch.nn.functional.logsigmoid(-p_logits)",)
    assert [(edit.line, edit.new_lines) for edit in fix.edits] == [
        (40, ("p_logits = self.linear(h)", "p = torch.sigmoid(p_logits)")),
        (41, ("log_p = torch.nn.functional.logsigmoid(p_logits)",)),
    ]
    assert fix.code.splitlines() == [
        "p_logits = self.linear(h)",
        "p = torch.sigmoid(p_logits)",
        "log_p = torch.nn.functional.logsigmoid(p_logits)",
        "log_q = torch.nn.functional.logsigmoid(-p_logits)",
    ]


def test_the_complements_log_on_the_next_line_is_rewritten_with_it(make_evidence, make_stats):
    # A focal loss: `log(p)` failed first, `log(1 - p)` on the next line reaches -inf
    # next (a copy with only the first rewritten fails there).
    code = "pos = -alpha * (1 - p) ** gamma * torch.log(p)"
    evidence = _log_evidence(make_evidence, make_stats, code)
    made = OpCall("Sigmoid", SourceLine("train.py", 41, "p = torch.sigmoid(logits)"), ())
    after = OpCall(
        "Log", SourceLine("train.py", 43, "neg = -(1 - alpha) * p ** gamma * torch.log(1 - p)"), ()
    )
    fix = _from_logits(diagnose(replace(evidence, sigmoid_input=made, same_op_calls=(after,))))
    logsigmoid = "torch.nn.functional.logsigmoid"
    assert [(edit.line, edit.new_lines) for edit in fix.edits] == [
        (41, ("p_logits = logits", "p = torch.sigmoid(p_logits)")),
        (43, (f"neg = -(1 - alpha) * p ** gamma * {logsigmoid}(-p_logits)",)),
    ]
    assert fix.code.splitlines()[2:] == [
        f"pos = -alpha * (1 - p) ** gamma * {logsigmoid}(p_logits)",
        f"neg = -(1 - alpha) * p ** gamma * {logsigmoid}(-p_logits)",
    ]
