"""`gradient_doctor.torch.ops` exports exactly the safe ops, the twins of `gradient_doctor.ops`,
each documented with an example that runs."""

import doctest
import inspect

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch import ops  # noqa: E402

NAMES = [
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


def test_all_lists_every_public_op_and_each_is_documented():
    assert sorted(ops.__all__) == NAMES
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


@pytest.mark.parametrize("name", NAMES)
def test_each_example_runs_as_written(name):
    function = getattr(ops, name)
    finder = doctest.DocTestFinder(recurse=False)
    (test,) = finder.find(function, name, globs={"torch": torch, name: function})
    result = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE).run(test)
    assert result.attempted > 0 and result.failed == 0, name
