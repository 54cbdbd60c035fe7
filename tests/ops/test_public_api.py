"""`gradient_doctor.ops` exports exactly the safe ops."""

import inspect

from gradient_doctor import ops


def test_all_lists_every_public_op_and_each_is_documented():
    assert sorted(ops.__all__) == [
        "safe_acos",
        "safe_asin",
        "safe_div",
        "safe_log",
        "safe_norm",
        "safe_sqrt",
        "safe_where",
        "stable_logsumexp",
        "stable_segment_softmax",
        "stable_softmax",
    ]
    for name in ops.__all__:
        function = getattr(ops, name)
        for section in ("Args:", "Returns:", "Raises:", "Example:"):
            assert section in function.__doc__, (name, section)
        for parameter in inspect.signature(function).parameters.values():
            if parameter.default is not inspect.Parameter.empty:
                assert "Defaults to" in function.__doc__.split(f"{parameter.name}:", 1)[1], (
                    name,
                    parameter.name,
                )
