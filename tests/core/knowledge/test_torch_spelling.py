"""Fixes of torch code name torch's helpers (never TensorFlow's), whatever prefix the user wrote."""

import pytest

from gradient_doctor.core.knowledge.source.calls import find_call
from gradient_doctor.core.knowledge.source.spelling import fill, namespace, spell


@pytest.mark.parametrize(
    ("code", "name"),
    [("y = torch.log(p)", "log"), ("y = F.softmax(z, dim=1)", "softmax")],
)
def test_torch_calls_are_in_the_torch_namespace(code, name):
    assert namespace(find_call(code, [name])) == "torch"


@pytest.mark.parametrize(
    ("helper", "spelled"),
    [
        ("maximum", "torch.clamp_min"),
        ("clip", "torch.clamp"),
        ("max", "torch.amax"),
        ("logsumexp", "torch.logsumexp"),
        ("sqrt", "torch.sqrt"),
    ],
)
def test_torch_helpers(helper, spelled):
    # `F.softmax` is torch.nn.functional's: helpers still come from `torch.`, not `F.`.
    assert spell(find_call("y = F.softmax(z, dim=1)", ["softmax"]), helper) == spelled


def test_a_guard_template_for_a_torch_call():
    call = find_call("q = torch.log(1 - p)", ["log"])
    assert fill("{maximum}({arg}, 1e-7)", call, "1 - p") == "torch.clamp_min(1 - p, 1e-7)"
    assert spell(find_call("q = tf.math.log(1 - p)", ["log"]), "maximum") == "tf.maximum"


@pytest.mark.parametrize(
    ("code", "op", "guarded"),
    [
        # A tensor's method: its operand is the tensor it is called on.
        (
            "norm = (grads**2).sum(dim=1).sqrt()",
            "Sqrt",
            "norm = torch.clamp_min((grads**2).sum(dim=1), 1e-12).sqrt()",
        ),
        ("l = -(p.log() * y).mean()", "Log", "l = -(torch.clamp_min(p, 1e-7).log() * y).mean()"),
        ("r = self.var[0].rsqrt()", "Rsqrt", "r = torch.clamp_min(self.var[0], 1e-12).rsqrt()"),
        # `s.pow(0.5)`: the base is `s`, never the exponent written in the call.
        ("x = s.pow(0.5)", "Pow", "x = torch.clamp_min(s, 1e-12).pow(0.5)"),
        (
            "a = torch.sqrt(x).acos()",
            "Acos",
            "a = torch.clamp(torch.sqrt(x), -1.0 + 1e-7, 1.0 - 1e-7).acos()",
        ),
        # A module's function keeps its argument as the operand.
        ("y = torch.log(p.exp())", "Log", "y = torch.log(torch.clamp_min(p.exp(), 1e-7))"),
    ],
)
def test_a_guard_of_a_torch_tensor_method_wraps_the_tensor(code, op, guarded):
    from gradient_doctor.core.knowledge.rewrites.guards import GUARDS, guard_fix

    fix = guard_fix("safe_guard", "Keep it in range", code, op, framework="torch")
    assert fix.rewrite == (guarded,)
    assert GUARDS[op]  # the op has its guard


def test_a_torch_line_that_does_not_parse_gets_a_generic_torch_line():
    from gradient_doctor.core.knowledge.rewrites.guards import GUARDS, guard_fix

    for op in GUARDS:
        fix = guard_fix(
            "safe_guard", "Keep it in range", "out = model(batch)", op, framework="torch"
        )
        assert "tf." not in fix.code, (op, fix.code)
        assert not fix.rewrite  # a generic line is no patch of the user's
    tf_fix = guard_fix("safe_log", "Keep it in range", "out = model(batch)", "Log")
    assert tf_fix.code == "y = tf.math.log(tf.maximum(x, 1e-7))"


def test_an_exp_clip_of_a_torch_tensor_method_is_spelled_in_torch():
    from gradient_doctor.core.dtype_limits import dtype_limits
    from gradient_doctor.core.knowledge.rewrites.exp import clip_exp_input

    fix = clip_exp_input(
        "w = (h @ a).exp() * mask", "Exp", dtype_limits("float32"), framework="torch"
    )
    assert fix.rewrite == ("w = torch.clamp_max((h @ a), 79.0).exp() * mask",)


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        # log(sum(exp(x))) written with tensor methods, as an InfoNCE normaliser is.
        ("log_z = scores.exp().sum(dim=1).log()", "log_z = torch.logsumexp(scores, dim=1)"),
        ("z = torch.log(s.exp().sum(1))", "z = torch.logsumexp(s, 1)"),
        # A sum over every element: torch.logsumexp needs a dim.
        ("z = torch.log(torch.exp(s).sum())", "z = torch.logsumexp(s.flatten(), dim=0)"),
        ("l = (a @ b).exp().sum().log()", "l = torch.logsumexp((a @ b).flatten(), dim=0)"),
    ],
)
def test_a_log_sum_exp_of_tensor_methods_is_torchs_logsumexp(code, rewritten):
    from gradient_doctor.core.knowledge.rewrites.exp import stable_logsumexp

    assert stable_logsumexp(code).rewrite == (rewritten,)
