"""A log guarded at its origin guards, in the same patch, the step's other bare logs in
the same risky range (of a probability: values in [0, 1]; of anything else: values near
0), each at its own line and column: none of a regression's output above 1, none outside
the user's files, none already guarded as written."""

import dataclasses

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.knowledge import diagnose

D_LOSS = "d = -tf.reduce_mean(tf.math.log(p_real) + tf.math.log(1.0 - p_fake))"
G_LOSS = "g = -tf.reduce_mean(tf.math.log(p_gen))"
REGRESSION = "r = tf.reduce_mean(tf.math.log(y_reg))"
SMOOTHED = "s = tf.reduce_mean(tf.math.log(q + 1e-6))"
SCRIPT = (
    "import tensorflow as tf\n"
    "\n"
    "\n"
    "def losses(p_real, p_fake, p_gen, y_reg, q):\n"
    f"    {D_LOSS}\n"
    f"    {G_LOSS}\n"
    f"    {REGRESSION}\n"
    f"    {SMOOTHED}\n"
    "    return d + g + r + s\n"
)


def _call(code, line, nth=0, file="train.py"):
    """The user's line `line` with the span of its `nth` `tf.math.log(...)` call."""
    start = -1
    for _ in range(nth + 1):
        start = code.index("tf.math.log(", start + 1)
    depth, end = 0, start
    for end in range(code.index("(", start), len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            break
    return SourceLine(file, line, code, column=start, end_column=end + 1)


def _evidence(make_evidence, make_stats, calls, feeding_ops=frozenset({"Sigmoid"})):
    """A Log that went -inf on `p_real` at line 5 of train.py, with `calls` its siblings,
    each (source, min, max, source_kind); a Sigmoid upstream makes it a probability's."""
    evidence = make_evidence(
        op="Log",
        code=D_LOSS,
        inputs=(make_stats(min=0.0, max=0.97, zeros=2),),
        outputs=(make_stats(min=-30.0, max=0.0, inf=2),),
        feeding_ops=feeding_ops,
    )
    origin = dataclasses.replace(evidence.origin, source=_call(D_LOSS, 5))
    siblings = tuple(
        OpCall("Log", source, (make_stats(min=low, max=high),), kind)
        for source, low, high, kind in calls
    )
    return dataclasses.replace(evidence, origin=origin, same_op_calls=siblings)


def _added(patch):
    return [line[1:].strip() for line in patch.splitlines() if line.startswith("+ ")]


def test_two_siblings_of_a_probability_near_0_are_guarded_in_one_patch(
    tmp_path, make_evidence, make_stats
):
    (tmp_path / "train.py").write_text(SCRIPT)
    evidence = _evidence(
        make_evidence,
        make_stats,
        [(_call(D_LOSS, 5, nth=1), 3e-5, 0.99, "op"), (_call(G_LOSS, 6), 2e-4, 0.9, "op")],
    )
    diagnosis = diagnose(evidence)
    assert "Also guarded: the other log at line 5, whose input reached 3e-05" in (
        diagnosis.explanation
    )
    assert "the log at line 6, whose input reached 0.0002 at this step." in diagnosis.explanation
    placed = place_fixes(diagnosis.finding(evidence), root=str(tmp_path))
    by_family = {fix.family: fix for fix in placed.fixes}
    assert _added(by_family["safe_log"].patch) == [
        "d = -tf.reduce_mean(tf.math.log(tf.maximum(p_real, 1e-7))"
        " + tf.math.log(tf.maximum(1.0 - p_fake, 1e-7)))",
        "g = -tf.reduce_mean(tf.math.log(tf.maximum(p_gen, 1e-7)))",
    ]
    assert _added(by_family["clip_input_domain"].patch) == [
        "d = -tf.reduce_mean(tf.math.log(tf.clip_by_value(p_real, 1e-7, 1.0))"
        " + tf.math.log(tf.clip_by_value(1.0 - p_fake, 1e-7, 1.0)))",
        "g = -tf.reduce_mean(tf.math.log(tf.clip_by_value(p_gen, 1e-7, 1.0)))",
    ]
    assert [edit.line for edit in by_family["safe_log"].edits] == [5, 6]


def test_a_regressions_log_and_a_guarded_one_are_left_as_written(
    tmp_path, make_evidence, make_stats
):
    (tmp_path / "train.py").write_text(SCRIPT)
    evidence = _evidence(
        make_evidence,
        make_stats,
        [
            (_call(REGRESSION, 7), 1e-5, 4.2, "op"),  # above 1: not a probability
            (_call(SMOOTHED, 8), 1e-6, 0.5, "op"),  # already kept off 0
        ],
    )
    diagnosis = diagnose(evidence)
    assert "Also guarded" not in diagnosis.explanation
    placed = place_fixes(diagnosis.finding(evidence), root=str(tmp_path))
    safe = next(fix for fix in placed.fixes if fix.family == "safe_log")
    assert _added(safe.patch) == [
        "d = -tf.reduce_mean(tf.math.log(tf.maximum(p_real, 1e-7)) + tf.math.log(1.0 - p_fake))"
    ]


def test_a_probabilitys_log_far_from_0_is_guarded_a_positive_values_only_near_0(
    make_evidence, make_stats
):
    far = [(_call(G_LOSS, 6), 0.02, 0.99, "op")]
    probability = diagnose(_evidence(make_evidence, make_stats, far))
    assert "the log at line 6, whose input reached 0.02" in probability.explanation
    positive = diagnose(_evidence(make_evidence, make_stats, far, feeding_ops=frozenset()))
    assert "Also guarded" not in positive.explanation
    near = [(_call(G_LOSS, 6), 2e-4, 3.5, "op")]
    positive = diagnose(_evidence(make_evidence, make_stats, near, feeding_ops=frozenset()))
    assert [fix.family for fix in positive.fixes] == ["safe_log", "activation_change"]
    assert "the log at line 6, whose input reached 0.0002" in positive.explanation
    assert positive.fixes[0].code.splitlines()[1] == (
        "g = -tf.reduce_mean(tf.math.log(tf.maximum(p_gen, 1e-7)))"
    )


def test_a_sibling_in_a_library_is_not_guarded(tmp_path, make_evidence, make_stats):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "lib.py").write_text(SCRIPT)
    library_layer = (_call(G_LOSS, 6, file="lib.py"), 1e-5, 0.5, "layer_creation")
    library_file = (_call(G_LOSS, 6, file="lib.py"), 1e-5, 0.5, "op")
    # A library layer's own op, seen by the rule: not the user's call to rewrite.
    assert (
        "Also guarded"
        not in diagnose(_evidence(make_evidence, make_stats, [library_layer])).explanation
    )
    # A file the adapter says is not the user's: the origin's patch holds without it.
    evidence = _evidence(make_evidence, make_stats, [library_file])
    placed = place_fixes(
        diagnose(evidence).finding(evidence),
        root=str(tmp_path),
        user_file=lambda path: not path.endswith("lib.py"),
    )
    safe = next(fix for fix in placed.fixes if fix.family == "safe_log")
    assert "lib.py" not in safe.patch
    assert [edit.file for edit in safe.edits] == ["train.py"]
