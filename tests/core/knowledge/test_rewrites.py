"""Line rewrites for norms, exp and risky operands, on several styles of user code."""

import pytest

from gradient_doctor.core.dtype_limits import dtype_limits
from gradient_doctor.core.knowledge.rewrites.exp import (
    clip_exp_input,
    looks_like_softmax,
    stable_logsumexp,
    stable_softmax,
)
from gradient_doctor.core.knowledge.rewrites.norm import safe_norm
from gradient_doctor.core.knowledge.source.operands import risky_operand


@pytest.mark.parametrize(
    ("code", "fixed"),
    [
        (
            "n = tf.norm(x)",
            "n = tf.sqrt(tf.reduce_sum(tf.square(x)) + 1e-12)",
        ),
        (
            "n = tf.linalg.norm(v, axis=1, keepdims=True)",
            "n = tf.sqrt(tf.reduce_sum(tf.square(v), axis=1, keepdims=True) + 1e-12)",
        ),
        (
            "n = tf.norm(g, 'euclidean', [1, 2])",
            "n = tf.sqrt(tf.reduce_sum(tf.square(g), axis=[1, 2]) + 1e-12)",
        ),
        (
            "n = keras.ops.norm(h, axis=-1)",
            "n = keras.ops.sqrt(keras.ops.sum(keras.ops.square(h), axis=-1) + 1e-12)",
        ),
        # Every Euclidean norm of the line: either may be of a zero vector.
        (
            "return dot / (tf.norm(u, axis=1) * tf.norm(v, axis=1))",
            "return dot / (tf.sqrt(tf.reduce_sum(tf.square(u), axis=1) + 1e-12) * "
            "tf.sqrt(tf.reduce_sum(tf.square(v), axis=1) + 1e-12))",
        ),
        # PyTorch's keywords kept: the norm over `dim` stays over `dim`; `p=1` is no
        # Euclidean norm and stays as it is.
        (
            "d = torch.norm(a - b, dim=1) + torch.norm(a, p=1)",
            "d = torch.sqrt(torch.sum(torch.square(a - b), dim=1) + 1e-12) + torch.norm(a, p=1)",
        ),
        (
            "n = torch.linalg.norm(g, dim=-1, keepdim=True)",
            "n = torch.sqrt(torch.sum(torch.square(g), dim=-1, keepdim=True) + 1e-12)",
        ),
    ],
)
def test_safe_norm_rewrites_the_users_norm(code, fixed):
    assert safe_norm(code).code.splitlines()[0] == fixed


def test_safe_norm_declines_other_orders_and_lines_without_a_norm():
    assert safe_norm("n = tf.norm(x, ord=1)") is None
    assert safe_norm("y = tf.exp(x)") is None
    assert safe_norm("y = tf.exp(x)", required=True).code.startswith("norm = tf.sqrt(")


@pytest.mark.parametrize(
    ("code", "softmax"),
    [
        ("p = tf.exp(s) / tf.reduce_sum(tf.exp(s), axis=-1, keepdims=True)", True),
        ("attn = my_softmax(scores)", True),
        ("w = tf.exp(scores)", False),
        ("loss = K.mean(K.exp(-sigma) * err + sigma)", False),
    ],
)
def test_looks_like_softmax(code, softmax):
    assert looks_like_softmax(code) is softmax


def test_numpy_and_keras_softmax_use_their_own_libraries():
    code = "p = np.exp(z) / np.sum(np.exp(z), axis=-1, keepdims=True)"
    lines = stable_softmax(code).code.splitlines()
    assert lines[0].startswith("p = np.exp(z - np.max(z, axis=-1, keepdims=True)) / np.sum(")
    assert lines[-1] == "p = scipy.special.softmax(z, axis=-1)"
    code = "p = keras.ops.exp(z) / keras.ops.sum(keras.ops.exp(z))"
    assert stable_softmax(code).code.splitlines()[-1] == "p = keras.ops.softmax(z, axis=-1)"


def test_stable_softmax_on_an_attribute_argument():
    code = "w = tf.math.exp(self.scores)"
    assert stable_softmax(code).code.splitlines()[0] == (
        "w = tf.math.exp(self.scores - tf.reduce_max(self.scores, axis=-1, keepdims=True))"
    )


def test_stable_logsumexp_keeps_the_axis_and_declines_otherwise():
    code = "lse = K.log(K.sum(K.exp(x), axis=-1))"
    assert stable_logsumexp(code).code == "lse = tf.reduce_logsumexp(x, axis=-1)"
    assert stable_logsumexp("y = tf.math.log(p)") is None


def test_clip_exp_input_bound_follows_the_dtype():
    assert clip_exp_input("y = tf.exp(a)", "Exp", dtype_limits("float64")).code == (
        "y = tf.exp(tf.minimum(a, 638.0))"
    )
    assert clip_exp_input("y = f(a)", "Exp", dtype_limits("float32")) is None


@pytest.mark.parametrize(
    ("code", "op", "operand", "replaced"),
    [
        ("y = tf.math.log(p + q)", "Log", "p + q", "y = tf.math.log(Z)"),
        ("h = tf.math.xlogy(p, q)", "Xlogy", "q", "h = tf.math.xlogy(p, Z)"),
        ("r = d ** 0.5", "Pow", "d", "r = Z ** 0.5"),
        ("r = tf.pow(d, 0.5)", "Pow", "d", "r = tf.pow(Z, 0.5)"),
        ("q = a / (b - c)", "RealDiv", "(b - c)", "q = a / Z"),
        ("a = keras.ops.arccos(c)", "Acos", "c", "a = keras.ops.arccos(Z)"),
    ],
)
def test_risky_operand(code, op, operand, replaced):
    found = risky_operand(code, op)
    assert found.text == operand
    assert found.replaced(code, "Z") == replaced


def test_risky_operand_parenthesises_expressions_in_operators():
    found = risky_operand("r = d ** 0.5", "Pow")
    assert found.replaced("r = d ** 0.5", "d + 1e-12") == "r = (d + 1e-12) ** 0.5"
    assert risky_operand("y = f(x)", "Log") is None
