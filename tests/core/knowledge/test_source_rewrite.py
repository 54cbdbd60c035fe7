"""Finding calls, operators and assigned names on one line of user code."""

import pytest

from gradient_doctor.core.knowledge.source.calls import (
    assigned_name,
    find_call,
    is_identifier,
    replace_span,
)
from gradient_doctor.core.knowledge.source.operators import find_binary
from gradient_doctor.core.knowledge.source.spelling import fill, spell


@pytest.mark.parametrize(
    ("code", "prefix", "arg"),
    [
        ("w = tf.exp(scores)", "tf.", "scores"),
        ("w = tf.math.exp(scores)", "tf.math.", "scores"),
        ("e = K.exp(x - 1)", "K.", "x - 1"),
        ("y = keras.ops.exp(h)", "keras.ops.", "h"),
        ("y = np.exp(a[:, 0])", "np.", "a[:, 0]"),
        ("loss = K.mean(K.exp(-sigma) + sigma)", "K.", "-sigma"),
    ],
)
def test_find_call_reads_prefix_and_argument(code, prefix, arg):
    call = find_call(code, ("exp",))
    assert call is not None
    assert (call.prefix, call.name, call.args[0]) == (prefix, "exp", arg)
    assert code[call.start : call.end] == call.text


def test_find_call_splits_nested_arguments_and_keywords():
    code = "gp = tf.reduce_mean(tf.square(tf.norm(grads, axis=[1, 2]) - 1.0))"
    call = find_call(code, ("norm",))
    assert call.args == ("grads",)
    assert call.argument(2, "axis") == "[1, 2]"
    assert call.argument(3, "keepdims") is None
    assert call.text == "tf.norm(grads, axis=[1, 2])"


def test_find_call_ignores_similar_names_and_strings():
    assert find_call("y = safe_exp(x)", ("exp",)) is None
    assert find_call("y = tf.math.log1p(x)", ("log",)) is None
    call = find_call('y = tf.math.log(tf.strings.to_number("1)"))', ("log",))
    assert call.args == ('tf.strings.to_number("1)")',)


def test_with_argument_renders_the_call_with_keywords():
    call = find_call("s = tf.reduce_sum(x, axis=-1)", ("reduce_sum",))
    assert call.with_argument(0, "y") == "tf.reduce_sum(y, axis=-1)"


@pytest.mark.parametrize(
    ("code", "operator", "left", "right"),
    [
        ("w = a / b", "/", "a", "b"),
        ("u = x / tf.norm(x, axis=-1)", "/", "x", "tf.norm(x, axis=-1)"),
        ("p = tf.exp(s) / tf.reduce_sum(tf.exp(s))", "/", "tf.exp(s)", "tf.reduce_sum(tf.exp(s))"),
        ("r = (a + b) / c[0] * 2", "/", "(a + b)", "c[0]"),
        ("k = n // m", "//", "n", "m"),
        ("d = dist ** 0.5", "**", "dist", "0.5"),
        ("z = x / 1e-3", "/", "x", "1e-3"),
    ],
)
def test_find_binary_reads_both_operands(code, operator, left, right):
    binary = find_binary(code, operator)
    assert (binary.left, binary.right) == (left, right)
    assert code[binary.start : binary.end] == binary.text


def test_find_binary_does_not_confuse_operators():
    assert find_binary("k = n // m", "/") is None
    assert find_binary("x /= 2", "/") is None
    assert find_binary("s = 'a/b'", "/") is None
    assert find_binary("y = x ** 2", "/") is None


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("w = tf.exp(scores)", "w"),
        ("  self.alpha = tf.exp(s)", "self.alpha"),
        ("return tf.exp(s)", None),
        ("if a == b:", None),
    ],
)
def test_assigned_name(code, name):
    assert assigned_name(code) == name


def test_identifiers_and_spans():
    assert is_identifier("self.scores")
    assert not is_identifier("x - 1")
    assert replace_span("abcdef", 1, 3, "XY") == "aXYdef"


@pytest.mark.parametrize(
    ("code", "helper", "spelled"),
    [
        ("tf.exp(x)", "max", "tf.reduce_max"),
        ("tf.math.exp(x)", "maximum", "tf.maximum"),
        ("K.exp(x)", "sum", "tf.reduce_sum"),
        ("keras.ops.exp(x)", "max", "keras.ops.max"),
        ("ops.exp(x)", "clip", "ops.clip"),
        ("keras.ops.exp(x)", "l2_normalize", "keras.ops.normalize"),
        ("np.exp(x)", "max", "np.max"),
        ("np.exp(x)", "maximum", "np.maximum"),
    ],
)
def test_spell_follows_the_user_namespace(code, helper, spelled):
    assert spell(find_call(code, ("exp",)), helper) == spelled


def test_spell_without_a_call_is_tensorflow_and_fill_fills_helpers():
    assert spell(None, "clip") == "tf.clip_by_value"
    call = find_call("y = keras.ops.log(p)", ("log",))
    assert fill("{clip}({arg}, 1e-7, 1.0)", call, "p") == "keras.ops.clip(p, 1e-7, 1.0)"
