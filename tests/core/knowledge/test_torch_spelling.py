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
