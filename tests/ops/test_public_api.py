"""`gradient_doctor.ops` exports exactly the safe ops."""

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
        "stable_softmax",
    ]
    for name in ops.__all__:
        function = getattr(ops, name)
        for section in ("Args:", "Returns:", "Example:", "Defaults to"):
            assert section in function.__doc__, (name, section)
