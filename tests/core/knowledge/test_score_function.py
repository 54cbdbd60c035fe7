"""The score-function surrogate is written into the tape only where every name is certain."""

import textwrap

import pytest

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.score_function import score_function_surrogate
from gradient_doctor.core.patches import apply_edits


def _lines(code: str) -> list[str]:
    return textwrap.dedent(code).lstrip("\n").splitlines(keepends=True)


def _at(lines: list[str], text: str) -> SourceLine:
    number = next(i for i, line in enumerate(lines, 1) if text in line)
    return SourceLine("train.py", number, lines[number - 1].strip())


def _surrogate(code: str, choice: str, op: str = "ArgMax", rank: int | None = None):
    lines = _lines(code)
    call = _at(lines, ".gradient(")
    return score_function_surrogate(op, _at(lines, choice), call, lines, rank), lines


GAN = """
import tensorflow as tf

@tf.function
def train_step(x, real):
    with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
        logits = generator(x, training=True)
        tokens = tf.argmax(logits, axis=-1)
        fake = discriminator(tokens)
        g_loss = bce(tf.ones_like(fake), fake)
        g_loss += 0.01 * tf.add_n(generator.losses)
        d_loss = bce(tf.ones_like(real), discriminator(real)) + bce(tf.zeros_like(fake), fake)
    g_grads = g_tape.gradient(g_loss, generator.trainable_variables)
    d_grads = d_tape.gradient(d_loss, discriminator.trainable_variables)
"""


def test_the_surrogate_follows_the_last_assignment_of_the_tapes_target():
    made, lines = _surrogate(GAN, "tf.argmax(")
    assert (made.loss, made.choice, made.logits) == ("g_loss", "tokens", "logits")
    patched = "".join(apply_edits(lines, [made.edit]))
    compile(patched, "train.py", "exec")
    after = patched.split("g_loss += 0.01 * tf.add_n(generator.losses)\n")[1]
    assert after.splitlines()[2].strip() == "surrogate = tf.stop_gradient(g_loss) * tf.reduce_mean("
    assert "labels=tokens, logits=logits" in after
    assert "        g_loss += surrogate - tf.stop_gradient(surrogate)\n        d_loss =" in after


def test_an_integer_cast_of_the_choice_is_a_label_and_argmin_chooses_from_minus_the_scores():
    code = GAN.replace(
        "tokens = tf.argmax(logits, axis=-1)",
        "tokens = tf.cast(tf.math.argmin(logits, -1), tf.int32)",
    )
    made, _ = _surrogate(code, "argmin(", op="ArgMin")
    assert made.choice == "tokens"
    assert "labels=tokens, logits=-logits" in "\n".join(made.edit.new_lines)


@pytest.mark.parametrize(
    "choice_line",
    ["actions = tf.math.top_k(logits, k=2).indices", "_, actions = tf.nn.top_k(logits, 2)"],
)
def test_top_k_indices_take_the_log_probability_of_each_index(choice_line):
    code = GAN.replace("tokens = tf.argmax(logits, axis=-1)", choice_line).replace(
        "discriminator(tokens)", "discriminator(actions)"
    )
    made, _ = _surrogate(code, "top_k(", op="TopKV2")
    assert made.choice == "actions"
    assert "tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=-1)" in "\n".join(
        made.edit.new_lines
    )


def test_an_argmax_over_a_positive_axis_is_taken_only_when_it_is_the_last():
    code = GAN.replace("axis=-1", "axis=2")
    assert _surrogate(code, "tf.argmax(")[0] is None  # the rank is unknown
    assert _surrogate(code, "tf.argmax(", rank=2)[0] is not None
    assert _surrogate(code, "tf.argmax(", rank=3)[0] is None


@pytest.mark.parametrize(
    "old, new",
    [
        # The logits are an expression (re-running it would call the model again).
        ("tokens = tf.argmax(logits, axis=-1)", "tokens = tf.argmax(generator(x), axis=-1)"),
        # The logits are rebound between the choice and the loss.
        ("fake = discriminator(tokens)", "fake = discriminator(tokens)\n        logits = fake"),
        # The loss is last assigned inside a branch.
        (
            "g_loss += 0.01 * tf.add_n(generator.losses)",
            "if x is not None:\n            g_loss = g_loss * 2.0",
        ),
        # The gradient's target is not a plain name.
        ("g_tape.gradient(g_loss,", "g_tape.gradient(g_loss * 1.0,"),
        # The file names TensorFlow only through `from ... import`.
        ("import tensorflow as tf", "from tensorflow import argmax"),
    ],
)
def test_no_surrogate_where_a_name_is_not_certain(old, new):
    assert _surrogate(GAN.replace(old, new), "argmax(")[0] is None


def test_no_surrogate_for_a_choice_made_outside_the_tapes_block():
    code = """
    import tensorflow as tf

    class Policy(tf.keras.Model):
        def call(self, obs):
            logits = self.head(obs)
            return tf.argmax(logits, axis=-1)

    def train_step(obs):
        with tf.GradientTape() as tape:
            actions = policy(obs)
            loss = -tf.reduce_mean(tf.gather(rewards, actions))
        return tape.gradient(loss, policy.trainable_variables)
    """
    assert _surrogate(code, "tf.argmax(")[0] is None


def test_no_surrogate_for_an_op_that_is_not_a_choice():
    assert _surrogate(GAN, "tf.argmax(", op="Round")[0] is None
