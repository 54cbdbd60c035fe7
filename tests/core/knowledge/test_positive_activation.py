"""A log or a division of a value a relu made gets the line that made it rewritten to
softplus (positive everywhere, so every reader of the value is safe at once), at the
relu call the replay saw, spelled in the user's namespace; nothing for a relu Keras ran
inside a layer, a relu with arguments of its own, or an input no op of the step made."""

import dataclasses

import pytest

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.knowledge import diagnose

VARIANCE = "mean, var = out[:, :1], tf.nn.relu(out[:, 1:])"
NLL = "return tf.reduce_mean(0.5 * tf.math.log(var) + 0.5 * tf.square(y - mean) / var)"
SCRIPT = f"import tensorflow as tf\n\n\ndef nll(y, out):\n    {VARIANCE}\n    {NLL}\n"


def _relu(
    code: str, line: int = 5, kind: str = "op", make_stats=None, name="tf.nn.relu("
) -> OpCall:
    start = code.index(name)
    return OpCall(
        "Relu",
        SourceLine("nll.py", line, code, column=start, end_column=len(code)),
        (make_stats(),),
        kind,
    )


def _evidence(make_evidence, make_stats, op="Log", code=NLL, producer=None, argument=0):
    evidence = make_evidence(
        op=op,
        code=code,
        inputs=(make_stats(min=0.0, max=2.0, zeros=5), make_stats(min=0.0, max=2.0, zeros=5)),
        outputs=(make_stats(min=None, max=None, inf=5),),
    )
    origin = dataclasses.replace(evidence.origin, source=SourceLine("nll.py", 6, code))
    producers = [None, None]
    producers[argument] = producer
    return dataclasses.replace(evidence, origin=origin, input_producers=tuple(producers))


def _placed(diagnosis, evidence, tmp_path):
    (tmp_path / "nll.py").write_text(SCRIPT)
    return {
        fix.family: fix for fix in place_fixes(diagnosis.finding(evidence), str(tmp_path)).fixes
    }


def test_the_relu_that_fed_a_log_becomes_softplus_on_its_own_line(
    make_evidence, make_stats, tmp_path
):
    evidence = _evidence(make_evidence, make_stats, producer=_relu(VARIANCE, make_stats=make_stats))
    fix = _placed(diagnose(evidence), evidence, tmp_path)["activation_change"]
    added = [line[1:] for line in fix.patch.splitlines() if line.startswith("+ ")]
    assert added == ["    mean, var = out[:, :1], (tf.nn.softplus(out[:, 1:]) + 1e-6)"]
    assert fix.patch.startswith("--- a/nll.py\n+++ b/nll.py\n")


def test_a_division_by_a_relus_output_gets_the_same_rewrite(make_evidence, make_stats, tmp_path):
    producer = _relu(VARIANCE, make_stats=make_stats)
    evidence = _evidence(make_evidence, make_stats, op="RealDiv", producer=producer, argument=1)
    families = [fix.family for fix in diagnose(evidence).fixes]
    assert families[-1] == "activation_change" and "safe_div" in families


@pytest.mark.parametrize(
    ("line", "name", "softplus"),
    [
        ("s = keras.ops.relu(h) + 0.0", "keras.ops.relu(", "(keras.ops.softplus(h) + 1e-6)"),
        ("s = F.relu(h)", "F.relu(", "(F.softplus(h) + 1e-6)"),
        ("s = torch.relu(h)", "torch.relu(", "(torch.nn.functional.softplus(h) + 1e-6)"),
    ],
)
def test_softplus_is_spelled_where_the_relu_came_from(
    make_evidence, make_stats, line, name, softplus
):
    evidence = _evidence(
        make_evidence, make_stats, producer=_relu(line, make_stats=make_stats, name=name)
    )
    fix = next(f for f in diagnose(evidence).fixes if f.family == "activation_change")
    assert softplus in fix.code and fix.edits[0].old_lines == (line,)


def test_a_relu_keras_ran_is_named_softplus_where_its_layer_was_built(make_evidence, make_stats):
    inside_layer = _relu(
        'h = layers.Dense(4, activation="relu")(x)', make_stats=make_stats, name="layers.Dense("
    )
    producer = dataclasses.replace(inside_layer, source_kind="layer_creation")
    evidence = _evidence(make_evidence, make_stats, producer=producer)
    fix = next(f for f in diagnose(evidence).fixes if f.family == "activation_change")
    (edit,) = fix.edits
    assert edit.new_lines == ('h = layers.Dense(4, activation="softplus")(x)',)


_LAYER_OVER_LINES = (
    "import keras\n"
    "from keras import layers\n\n"
    "scale_head = layers.Dense(\n"
    '    4, activation="relu", kernel_initializer="zeros", name="scale"\n'
    ")\n"
)


@pytest.mark.parametrize(
    ("script", "patched"),
    [
        (
            _LAYER_OVER_LINES,
            '+    4, activation="softplus", kernel_initializer="zeros", name="scale"',
        ),
        (_LAYER_OVER_LINES.replace('activation="relu"', 'activation="tanh"'), None),
        (
            _LAYER_OVER_LINES.replace(', kernel_initializer="zeros"', ""),
            '+    4, activation="softplus", name="scale"',
        ),
    ],
)
def test_a_layer_built_over_several_lines_gets_its_activation_keyword_set_there(
    make_evidence, make_stats, tmp_path, script, patched
):
    # The rule sees the statement's first line only: its keyword is set where the file is
    # read, on the one call of those lines that passes activation="relu" (none: no patch).
    producer = OpCall(
        "Relu",
        SourceLine("heads.py", 4, "scale_head = layers.Dense(", end_line=6),
        (make_stats(),),
        "layer_creation",
    )
    evidence = _evidence(make_evidence, make_stats, producer=producer)
    fix = next(f for f in diagnose(evidence).fixes if f.family == "activation_change")
    assert fix.edits == () and 'activation="softplus"' in fix.code
    (tmp_path / "heads.py").write_text(script)
    (placed,) = [
        f
        for f in place_fixes(diagnose(evidence).finding(evidence), str(tmp_path)).fixes
        if f.family == "activation_change"
    ]
    if patched is None:
        assert placed.patch is None
        return
    changed = [line for line in placed.patch.splitlines() if line[:1] in "+-" and line[1:2] == " "]
    assert changed == [patched.replace("+", "-", 1).replace("softplus", "relu"), patched]


def test_no_rewrite_for_a_relu_with_settings_or_no_producer(make_evidence, make_stats):
    capped = _relu("s = tf.nn.relu(h, max_value=6.0)", make_stats=make_stats)
    in_a_layer_object = dataclasses.replace(
        _relu("h = layers.Dense(4, activation=relu)(x)", make_stats=make_stats, name="Dense("),
        source_kind="layer_creation",
    )  # an activation passed as a function, not named: left alone
    for producer in (capped, in_a_layer_object, None):
        evidence = _evidence(make_evidence, make_stats, producer=producer)
        fix = next(f for f in diagnose(evidence).fixes if f.family == "activation_change")
        assert not fix.edits  # the generic advice, with no patch
    division = _evidence(make_evidence, make_stats, op="RealDiv", producer=None, argument=1)
    assert "activation_change" not in [fix.family for fix in diagnose(division).fixes]


@pytest.mark.parametrize(
    ("line", "op", "name", "softplus"),
    [
        (
            "tau = self.tau.clamp(min=0.0)  # no negative temperature",
            "ClipByValue",
            "self.tau.clamp(",
            "tau = (torch.nn.functional.softplus(self.tau) + 1e-6)  # no negative temperature",
        ),
        ("s = torch.clamp_min(h, 0)", "Maximum", "torch.clamp_min(", "(torch.nn.functional"),
        ("s = tf.maximum(h, 0.0)", "Maximum", "tf.maximum(", "s = (tf.nn.softplus(h) + 1e-6)"),
        ("s = torch.clamp(h, 0.0, 1.0)", "ClipByValue", "torch.clamp(", None),
        ("s = tf.maximum(h, 1e-3)", "Maximum", "tf.maximum(", None),
    ],
)
def test_a_clamp_at_zero_is_a_relu_and_only_that(
    make_evidence, make_stats, line, op, name, softplus
):
    # A trained temperature clamped at 0 and divided by: exactly 0 once it trains below.
    start = line.index(name)
    made = SourceLine("contrast.py", 16, line, column=start, end_column=len(line))
    producer = OpCall(op, made, (make_stats(),), "op")
    evidence = _evidence(make_evidence, make_stats, op="RealDiv", producer=producer, argument=1)
    fixes = [f for f in diagnose(evidence).fixes if f.family == "activation_change"]
    if softplus is None:
        assert not fixes
        return
    (fix,) = fixes
    assert softplus in fix.edits[0].new_lines[0]
    assert "instead of a clamp at 0" in fix.title
