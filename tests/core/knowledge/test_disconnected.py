"""Variables without gradients: where the path breaks, why, what fixes it and what cannot."""

from dataclasses import replace

import pytest

from gradient_doctor.core.evidence import BadInput, Evidence
from gradient_doctor.core.findings import FIX_FAMILIES, SourceLine
from gradient_doctor.core.gradient_paths import (
    BREAK_KINDS,
    LEFT_FRAMEWORK,
    NEVER_READ,
    NOT_USED,
    NOT_WATCHED,
    OUTSIDE_TAPE,
    UNLOCATED,
    PathBreak,
)
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.blockers import BLOCKERS
from gradient_doctor.core.knowledge.rules import disconnected

TAPE_TRICKS = [
    "tape_watch",
    "watch_accessed_variables",
    "reorder_tapes",
    "persistent_tape",
    "use_model_fit",
]
STORY4_LINE = "generated_text = tf.argmax(gen_logits, axis=-1)"
# A generator shaped like story 4's: 13 variables in 8 layers.
STORY4_VARIABLES = (
    "generator/positional_embedding/embedding/embeddings",
    "generator/positional_embedding/embedding_1/embeddings",
    *(
        f"generator/{block}/multi_head_attention/{part}/{leaf}"
        for block in ("encoder", "decoder")
        for part in ("query", "key")
        for leaf in ("kernel", "bias")
    ),
    "generator/text_queries/queries",
    "generator/vocab_logits/kernel",
    "generator/vocab_logits/bias",
)


def test_story4_argmax_names_the_variables_the_line_and_why(
    make_break_evidence, families, not_fixes
):
    diagnosis = diagnose(make_break_evidence(variables=STORY4_VARIABLES))
    assert diagnosis.category == "disconnected_gradients"
    text = diagnosis.explanation
    assert "None of the 13 variables handed to the optimizer gets a gradient at step 0" in text
    assert "8 layers: `generator/positional_embedding/embedding` (embeddings), " in text
    assert "`generator/encoder/multi_head_attention/query` (kernel, bias)" in text
    assert "and 4 more" in text
    assert f"breaks at ArgMax on your line story4.py:141 `{STORY4_LINE}`" in text
    assert "ArgMax picks an index" in text
    assert "every variable before it gets None" in text
    assert '"No gradients provided for any variable"' in text
    assert families(diagnosis) == ["soft_embedding", "gumbel_softmax", "reinforce"] + [
        "straight_through"
    ]
    assert not_fixes(diagnosis) == TAPE_TRICKS
    assert all("gen_logits" in fix.code for fix in diagnosis.fixes)


def test_story4_fixes_rewrite_the_users_line(make_break_evidence):
    soft, gumbel, policy, straight = diagnose(make_break_evidence()).fixes
    assert soft.code.startswith("generated_text = tf.nn.softmax(gen_logits, axis=-1)")
    assert 'tf.einsum("...v,vd->...d", generated_text, embedding.embeddings)' in soft.code
    assert "generated_text = gumbel_softmax(gen_logits, temperature=0.5)" in gumbel.code
    assert "generated_text = soft + tf.stop_gradient(hard - soft)" in straight.code
    assert "log_probs = tf.nn.log_softmax(gen_logits, axis=-1)" in policy.code
    assert "tf.one_hot(generated_text," in policy.code
    assert "tf.stop_gradient(fake_output)" in policy.code


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("tokens = tf.argmax(logits, axis=-1)", "tokens = tf.nn.softmax(logits, axis=-1)"),
        ("ids = keras.ops.argmax(scores, axis=-1)", "ids = tf.nn.softmax(scores, axis=-1)"),
        ("best = tf.math.argmin(costs, 1)", "best = tf.nn.softmax(costs, axis=1)"),
        ("tokens = tf.argmax(model(x), axis=-1)", "logits = model(x)\ntokens = tf.nn.softmax("),
        ("", "# logits: the scores the tokens are chosen from\ntokens = tf.nn.softmax("),
    ],
)
def test_argmax_fixes_use_the_users_names(make_break_evidence, code, expected):
    soft = diagnose(make_break_evidence(code=code)).fixes[0]
    assert soft.code.startswith(expected)


def test_partial_break_says_keras_only_warns(make_break_evidence):
    evidence = make_break_evidence(
        op="ArgMax",
        code="labels = tf.argmax(aux_logits, axis=-1)",
        variables=("model/aux_head/kernel", "model/aux_head/bias"),
        all_disconnected=False,
        step=12,
    )
    text = diagnose(evidence).explanation
    assert text.startswith(
        "2 variables handed to the optimizer get no gradient at step 12 "
        "(layer `model/aux_head`: kernel, bias)."
    )
    assert "Keras only warns" in text
    assert "silently never train" in text
    assert "No gradients provided" not in text


def test_single_variable_and_names_without_a_layer(make_break_evidence):
    only = diagnose(make_break_evidence(variables=("temperature:0",))).explanation
    assert only.startswith(
        "The only variable handed to the optimizer gets no gradient at step 0 (`temperature`)."
    )


def test_sampling(make_break_evidence, families):
    evidence = make_break_evidence(
        op="RandomCategorical", code="tokens = tf.random.categorical(logits, 1)"
    )
    diagnosis = diagnose(evidence)
    assert "sampling a token is not differentiable" in diagnosis.explanation
    assert families(diagnosis) == ["gumbel_softmax", "straight_through", "reinforce"] + [
        "soft_embedding"
    ]
    assert "tokens = gumbel_softmax(logits, temperature=0.5)" in diagnosis.fixes[0].code
    assert "Gumbel-softmax" in diagnosis.fixes[1].title


@pytest.mark.parametrize(
    ("code", "table", "tokens"),
    [
        (
            "embedded = self.token_embedding(generated_text)",
            "self.token_embedding.embeddings",
            "generated_text",
        ),
        ("x = tf.nn.embedding_lookup(word_table, ids)", "word_table", "ids"),
        ("x = tf.gather(table, tokens, axis=0)", "table", "tokens"),
    ],
)
def test_lookup_of_generated_tokens(make_break_evidence, families, code, table, tokens):
    diagnosis = diagnose(make_break_evidence(op="ResourceGather", code=code))
    assert "integer indices" in diagnosis.explanation
    assert families(diagnosis)[0] == "soft_embedding"
    assert f'tf.einsum("...v,vd->...d", probs, {table})' in diagnosis.fixes[0].code
    assert f"`{tokens}`" in diagnosis.fixes[0].code
    assert f"tf.one_hot({tokens}," in diagnosis.fixes[2].code  # the policy gradient


def test_one_hot_of_generated_tokens_becomes_probabilities(make_break_evidence):
    evidence = make_break_evidence(op="OneHot", code="onehot = tf.one_hot(tokens, VOCAB)")
    soft = diagnose(evidence).fixes[0]
    assert "onehot = tf.nn.softmax(logits, axis=-1)" in soft.code
    assert "einsum" not in soft.code


def test_cast_to_integer(make_break_evidence, families):
    diagnosis = diagnose(make_break_evidence(op="Cast", code="ids = tf.cast(x * 10, tf.int32)"))
    assert "integers carry no gradient" in diagnosis.explanation
    assert families(diagnosis) == ["remove_cast", "straight_through"]
    assert diagnosis.fixes[0].code == "ids = x * 10  # was: tf.cast(x * 10, tf.int32)"
    assert diagnosis.fixes[1].code.splitlines() == [
        "value = x * 10",
        "ids = value + tf.stop_gradient(tf.cast(tf.cast(value, tf.int32), value.dtype) - value)"
        "  # integer values forward, identity gradient backward",
    ]


@pytest.mark.parametrize(
    ("op", "code", "straight"),
    [
        ("Round", "q = tf.round(h)", "q = h + tf.stop_gradient(tf.round(h) - h)"),
        ("Floor", "b = tf.math.floor(x / 2)", "b = value + tf.stop_gradient(tf.math.floor(value)"),
        ("Ceil", "c = tf.math.ceil(h)", "c = h + tf.stop_gradient(tf.math.ceil(h) - h)"),
        ("Sign", "s = tf.sign(h)", "s = h + tf.stop_gradient(tf.sign(h) - h)"),
    ],
)
def test_rounding(make_break_evidence, families, op, code, straight):
    diagnosis = diagnose(make_break_evidence(op=op, code=code))
    assert f"{op} is piecewise constant" in diagnosis.explanation
    assert families(diagnosis) == ["straight_through", "remove_cast"]
    assert straight in diagnosis.fixes[0].code


@pytest.mark.parametrize(
    ("op", "code", "soft"),
    [
        ("Greater", "mask = scores > 0.5", "tf.sigmoid((scores - 0.5) / 0.1)"),
        ("LessEqual", "near = dist <= radius", "tf.sigmoid((radius - dist) / 0.1)"),
        ("Less", "m = tf.math.less(a, b + 1)", "tf.sigmoid((b + 1 - a) / 0.1)"),
        ("Equal", "same = tf.equal(a, b)", "tf.sigmoid((a - b) / 0.1)"),
    ],
)
def test_comparisons(make_break_evidence, families, op, code, soft):
    diagnosis = diagnose(make_break_evidence(op=op, code=code))
    assert "a comparison has no gradient" in diagnosis.explanation
    assert families(diagnosis) == ["straight_through"]
    assert soft in diagnosis.fixes[0].code


def test_stop_gradient_is_usually_intended(make_break_evidence, families):
    evidence = make_break_evidence(
        op="StopGradient",
        code="target = tf.stop_gradient(target_net(next_obs))",
        variables=("target/dense/kernel", "target/dense/bias"),
        all_disconnected=False,
    )
    diagnosis = diagnose(evidence)
    assert "on purpose" in diagnosis.explanation
    assert "usually intended" in diagnosis.explanation
    assert families(diagnosis) == ["remove_stop_gradient", "exclude_unused_variables"]
    assert diagnosis.fixes[0].code.startswith("target = target_net(next_obs)")
    assert '"target/dense/kernel"' in diagnosis.fixes[1].code
    # The removal is an edit of the line where the path breaks (a patch to trial).
    (edit,) = diagnosis.fixes[0].edits
    assert (edit.file, edit.line, edit.new_lines) == (
        "story4.py",
        141,
        ("target = target_net(next_obs)",),
    )


def test_numpy_function(make_break_evidence, families):
    code = "y = tf.numpy_function(smooth, [x], tf.float32)"
    diagnosis = diagnose(make_break_evidence(op="PyFunc", code=code))
    assert "tf.numpy_function has no gradient" in diagnosis.explanation
    assert families(diagnosis) == ["stay_in_tensorflow", "custom_gradient"]
    assert diagnosis.fixes[0].code.startswith("y = smooth(x)")
    assert "def smooth_with_gradient(x):" in diagnosis.fixes[1].code
    assert diagnosis.fixes[1].code.endswith("y = smooth_with_gradient(x)")


def test_an_op_without_a_family(make_break_evidence, families):
    diagnosis = diagnose(make_break_evidence(op="Unique", code="u, idx = tf.unique(x)"))
    assert "Unique has no registered gradient" in diagnosis.explanation
    assert families(diagnosis) == ["custom_gradient"]
    assert "u, idx = tf.unique(x)" in diagnosis.fixes[0].code


def test_shape_only_ops_propose_nothing_false(make_break_evidence):
    diagnosis = diagnose(make_break_evidence(op="ZerosLike", code="z = tf.zeros_like(h)"))
    assert "reads only the shape" in diagnosis.explanation
    assert diagnosis.fixes == ()


def test_outside_tape(make_break_evidence, families):
    code = "loss = tf.reduce_mean(tf.square(forecast - target))"
    diagnosis = diagnose(make_break_evidence(kind=OUTSIDE_TAPE, op="Sub", code=code))
    text = diagnosis.explanation
    assert f"runs through Sub on your line story4.py:141 `{code}`" in text
    assert "the tape was not recording" in text
    assert "before or after the `with tf.GradientTape()` block" in text
    assert families(diagnosis) == ["compute_inside_tape"]
    assert diagnosis.fixes[0].code.splitlines() == [
        "with tf.GradientTape() as tape:",
        f"    {code}  # moved inside: the tape records only what runs in the block",
        "grads = tape.gradient(loss, model.trainable_variables)",
    ]
    watch = diagnosis.not_fixes[0]
    assert watch.remedy == "tape_watch"
    assert "Sub at story4.py:141 ran while no tape was recording" in watch.why


def test_outside_tape_forward_pass_keeps_the_rest_inside(make_break_evidence):
    evidence = make_break_evidence(kind=OUTSIDE_TAPE, op="MatMul", code="pred = model(x)")
    code = diagnose(evidence).fixes[0].code
    assert "    pred = model(x)  # moved inside" in code
    assert "    ...  # and every later step up to the loss" in code


def test_numpy_round_trip(make_break_evidence, families):
    evidence = make_break_evidence(
        kind=LEFT_FRAMEWORK,
        op="Sigmoid",
        code="probs = np.clip(pred.numpy(), EPS, 1.0 - EPS)",
        reentry="loss = tf.constant(weighted_log_loss(probs, labels.numpy()))",
    )
    diagnosis = diagnose(evidence)
    text = diagnosis.explanation
    assert "left TensorFlow (`.numpy()`/NumPy) after Sigmoid on your line story4.py:141" in text
    assert "came back as a constant on your line story4.py:150 `loss = tf.constant(" in text
    assert families(diagnosis) == ["stay_in_tensorflow"]
    code = diagnosis.fixes[0].code
    assert "probs = tf.clip_by_value(pred, EPS, 1.0 - EPS)" in code
    assert "loss = weighted_log_loss(probs, labels)" in code


def test_numpy_round_trip_elsewhere_gets_an_example_on_the_users_value(make_break_evidence):
    evidence = make_break_evidence(
        kind=LEFT_FRAMEWORK, op="Sigmoid", code="pred = model(x)", reentry="loss = f(y, q)"
    )
    code = diagnose(evidence).fixes[0].code
    assert "between story4.py:141 and story4.py:150, keep `pred` in TensorFlow" in code
    assert code.endswith("clipped = tf.clip_by_value(pred, 0.0, 1.0)")


def test_layer_not_used_by_the_loss(make_break_evidence, families):
    evidence = make_break_evidence(
        kind=NOT_USED,
        op="BiasAdd",
        code="aux = self.aux_head(h)",
        variables=("model/aux_head/kernel", "model/aux_head/bias"),
        all_disconnected=False,
    )
    diagnosis = diagnose(evidence)
    assert "the loss does not depend on the output of their layer" in diagnosis.explanation.lower()
    assert "BiasAdd on your line story4.py:141" in diagnosis.explanation
    assert families(diagnosis) == ["exclude_unused_variables"]
    assert 'unused = {"model/aux_head/kernel", "model/aux_head/bias"}' in diagnosis.fixes[0].code


def test_when_no_variable_trains_none_is_told_to_stop_training(make_break_evidence, families):
    # Every variable handed to the optimizer is cut (a loss computed through NumPy in a
    # helper and re-wrapped): freezing them all would train nothing.
    evidence = make_break_evidence(kind=NOT_USED, op="Sigmoid", code="p = tf.sigmoid(z)")
    diagnosis = diagnose(evidence)
    assert families(diagnosis) == ["stay_in_tensorflow"]
    assert "between the model's output and the loss" in diagnosis.fixes[0].code


def test_layer_never_called(make_break_evidence, families):
    variables = ("model/tenure_head/kernel", "model/tenure_head/bias", "model/extra/gamma")
    evidence = make_break_evidence(
        kind=NEVER_READ, op=None, variables=variables, all_disconnected=False
    )
    diagnosis = diagnose(evidence)
    assert "the forward pass does not use them (their layer is built but not called, or its " in (
        diagnosis.explanation
    )
    assert "2 layers: `model/tenure_head` (kernel, bias) and `model/extra` (gamma)" in (
        diagnosis.explanation
    )
    assert families(diagnosis) == ["exclude_unused_variables"]
    # Exactly these variables: a layer's prefix would take others of it that may train.
    assert f"unused = {{{', '.join(repr(v).replace(chr(39), chr(34)) for v in variables)}}}" in (
        diagnosis.fixes[0].code
    )
    assert "v.path not in unused" in diagnosis.fixes[0].code


# A frozen model has no path and no tape to trick (its own test below).
@pytest.mark.parametrize(
    "kind", [kind for kind in BREAK_KINDS if kind not in (NOT_WATCHED, "frozen")]
)
def test_every_kind_rules_out_the_tape_tricks(make_break_evidence, not_fixes, kind):
    diagnosis = diagnose(make_break_evidence(kind=kind))
    assert diagnosis.category == "disconnected_gradients"
    assert not_fixes(diagnosis) == TAPE_TRICKS
    assert all(fix.family in FIX_FAMILIES for fix in diagnosis.fixes)


def test_variables_the_tape_was_not_watching_get_watched_and_no_tape_trick_is_ruled_out(
    make_break_evidence, not_fixes
):
    # Watching them is the fix, and model.fit's tape watches what it reads: of the tape
    # tricks only a persistent tape (which watches as the same tape would) stays out.
    diagnosis = diagnose(make_break_evidence(kind=NOT_WATCHED))
    assert "made with `watch_accessed_variables=False`" in diagnosis.explanation
    assert [fix.family for fix in diagnosis.fixes] == ["tape_watch"]
    assert "with tf.GradientTape() as tape:" in diagnosis.fixes[0].code
    assert "tape.watch([v.value if isinstance(v, keras.Variable) else v" in diagnosis.fixes[0].code
    assert not_fixes(diagnosis) == ["persistent_tape"]


def test_a_break_without_a_user_line_still_names_the_op(make_break_evidence):
    text = diagnose(make_break_evidence(code=None)).explanation
    assert "breaks at ArgMax. ArgMax picks an index" in text
    assert "your line" not in text


@pytest.mark.parametrize("blocker", BLOCKERS, ids=lambda b: b.name)
def test_every_blocker_diagnoses_each_of_its_ops(make_break_evidence, blocker):
    for op in sorted(blocker.ops):
        diagnosis = diagnose(make_break_evidence(op=op, code="y = f(x)"))
        assert diagnosis.explanation.count(op) >= 2, op


def test_a_path_break_comes_before_bad_input(make_break_evidence):
    bad = BadInput("x", (32, 10), nan=3, inf=0, rows=(4,), columns=(2,))
    evidence = replace(make_break_evidence(), bad_inputs=(bad,))
    assert diagnose(evidence).category == "disconnected_gradients"


def test_declines_without_a_path_break(make_evidence):
    assert disconnected.diagnose(make_evidence()) is None


def test_an_unlocated_break_still_names_the_parameters_that_never_train():
    # The adapter could not look for the break (its rerun stopped early): the finding
    # still says which parameters get no gradient, why the break is not named, and
    # what PyTorch does with them, spelled in PyTorch.
    cut = PathBreak(
        UNLOCATED,
        None,
        ("head.weight", "head.bias", "encoder.0.weight"),
        framework="torch",
        why="the rerun stopped before update 12",
    )
    evidence = Evidence(step=12, phase=None, origin=None, path_break=cut, all_disconnected=False)
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "disconnected_gradients"
    text = diagnosis.explanation
    assert text.startswith("3 variables handed to the optimizer get no gradient at step 12")
    assert "`head` (weight, bias)" in text and "`encoder.0` (weight)" in text
    assert "Where their path to the loss breaks was not found (the rerun stopped before " in text
    assert "skips the parameters whose `.grad` is None" in text
    assert [fix.family for fix in diagnosis.fixes] == ["exclude_unused_variables"]
    code = diagnosis.fixes[0].code
    assert "tf." not in text + code
    assert 'unused = {"head.weight", "head.bias", "encoder.0.weight"}' in code
    assert "if name in unused or any(" in code  # encoder.0.bias, which trains, is left alone
    assert "optimizer.step() skips them" in code and "Adam" not in code  # not the user's


def test_variables_all_cut_at_two_places_are_each_a_part_not_all_of_them(make_break_evidence):
    # Two `.item()` lines each cut a part of the model: each break holds a part only.
    evidence = replace(make_break_evidence(variables=STORY4_VARIABLES[:4]), path_breaks=2)
    diagnosis = diagnose(evidence)
    text = diagnosis.explanation
    assert text.startswith("4 variables handed to the optimizer get no gradient at step 0")
    assert "the rest are cut at 1 other place, reported apart: none of them trains" in text
    assert "None of the" not in text
    assert '"No gradients provided for any variable"' in text  # none has one: Keras raises
    assert diagnosis.finding(evidence).disconnected.all is False
    alone = make_break_evidence(variables=STORY4_VARIABLES[:4])
    assert diagnosis.finding(alone).disconnected.all is True


def test_a_model_frozen_before_its_own_step_names_the_line_and_unfreezes_it_around_it():
    from gradient_doctor.core.findings import SourceLine
    from gradient_doctor.core.gradient_paths import FROZEN

    trained = SourceLine("gan.py", 31, "    d_loss = d.train_on_batch(batch, labels)")
    cut = PathBreak(
        FROZEN, None, ("disc/dense/kernel", "disc/dense/bias"), model="disc", trained_at=trained
    )
    diagnosis = diagnose(
        Evidence(step=0, phase=None, origin=None, path_break=cut, all_disconnected=False)
    )
    assert diagnosis.category == "disconnected_gradients"
    assert diagnosis.explanation.startswith(
        "Model `disc` is trained by your line gan.py:31 `d_loss = d.train_on_batch(batch, "
        "labels)`, but none of its 2 weights is trainable"
    )
    assert diagnosis.not_fixes == ()  # no tape, no path: none of the tape tricks applies
    (fix,) = diagnosis.fixes
    assert fix.family == "unfreeze_model"
    assert fix.code.splitlines() == [
        "d.trainable = True  # before its own train_on_batch / fit",
        "d_loss = d.train_on_batch(batch, labels)",
        "d.trainable = False  # only before a combined model's step (a GAN's)",
    ]


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        ("h = h.detach()", "h = h"),
        ("return self.norm(x + self.mlp(x).detach())", "return self.norm(x + self.mlp(x))"),
    ],
)
def test_a_detach_of_any_expression_is_taken_off_its_line(code, rewritten):
    # A residual branch detached by mistake: the fix is a patch of that line, not the
    # generic `y = x` (a method call on an expression has no name for a prefix).
    from gradient_doctor.core.knowledge.remedies.torch_paths import detach_fixes

    (fix,) = detach_fixes(code, None)
    assert fix.family == "remove_stop_gradient"
    assert fix.rewrite == (rewritten,)


def test_of_nested_casts_the_one_to_an_integer_is_rewritten():
    # The outer cast back to float is found first on the line: rewriting it kept the
    # integer cast (no gradient) and fed an int32 to float arithmetic.
    from gradient_doctor.core.knowledge.remedies.discrete import cast_fixes
    from gradient_doctor.core.knowledge.source.calls import find_call

    code = "s = tf.cast(tf.cast(self.scale(h) * 3.0, tf.int32), tf.float32)"
    remove, straight = cast_fixes(code, find_call(code, ("cast",)))
    assert remove.code.startswith("s = tf.cast(self.scale(h) * 3.0, tf.float32)")
    assert straight.code.splitlines() == [
        "value = self.scale(h) * 3.0",
        "s = tf.cast(value + tf.stop_gradient(tf.cast(tf.cast(value, tf.int32), value.dtype) "
        "- value), tf.float32)  # integer values forward, identity gradient backward",
    ]


def test_the_snippet_freezing_unused_parameters_matches_names_with_the_models_own_prefix():
    # With several root modules (a DQN's online and target nets) the doctor names
    # parameters under their root ("DuelingQ.value_head.weight"), which the model's own
    # named_parameters() does not give: the snippet must still match them.
    from gradient_doctor.core.knowledge.layer_groups import group_by_layer
    from gradient_doctor.core.knowledge.remedies.torch_paths import exclude_unused_parameters

    groups = group_by_layer(("DuelingQ.value_head.weight", "DuelingQ.value_head.bias"), ".")
    code = exclude_unused_parameters(groups, "title", "lead").code

    class Parameter:
        def __init__(self):
            self.trains = True

        def requires_grad_(self, flag):
            self.trains = flag

    parameters = {
        name: Parameter() for name in ("value_head.weight", "value_head.bias", "adv.weight")
    }

    class Model:
        def named_parameters(self):
            return list(parameters.items())

    exec(code, {"model": Model()})
    assert {name: p.trains for name, p in parameters.items()} == {
        "value_head.weight": False,
        "value_head.bias": False,
        "adv.weight": True,
    }


def test_an_argmax_used_as_a_mask_is_fixed_by_weighting_the_options_not_by_tokens(
    make_break_evidence, families
):
    # A router picking an expert: its index is cast and made a mask, never looked up.
    evidence = make_break_evidence(code="choice = tf.argmax(router(xb), axis=-1)")
    evidence = replace(evidence, path_break=replace(evidence.path_break, picks_rows=False))
    diagnosis = diagnose(evidence)
    assert families(diagnosis) == ["soft_choice", "straight_through", "reinforce"]
    soft, straight, policy = diagnosis.fixes
    assert "choice_weights = tf.nn.softmax(logits, axis=-1)" in soft.code
    assert "choice_weights = soft + tf.stop_gradient(hard - soft)" in straight.code
    for fix in diagnosis.fixes:
        assert "embedding" not in fix.code and "fake_output" not in fix.code
        assert "token" not in fix.title
    # The same argmax spelled in PyTorch.
    torch_break = replace(
        evidence.path_break,
        framework="torch",
        node=replace(
            evidence.path_break.node,
            source=SourceLine("moe.py", 9, "choice = router(x).argmax(dim=-1)"),
        ),
    )
    torch_fixes = diagnose(replace(evidence, path_break=torch_break)).fixes
    assert [fix.family for fix in torch_fixes] == ["soft_choice", "straight_through", "reinforce"]
    assert "choice_weights = torch.softmax(logits, dim=-1)" in torch_fixes[0].code
