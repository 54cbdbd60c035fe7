"""NaN the user's own input pipeline wrote into the batch: the pipeline's function is
replayed op by op, its op named on its line, and the patch of that line proved by a
rerun of the patched copy (the step's trial cannot run a patched pipeline)."""

import pytest

from tests.conftest import CONFIRMED_SCRIPTS, line_of

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("script", "op", "line", "family"),
    [
        (
            "tests/scripts/pipeline_map_flat_windows.py",
            "RealDiv",
            "window = (window - tf.reduce_mean(window)) / tf.math.reduce_std(window)",
            "safe_div",
        ),
        (
            "tests/scripts/pipeline_map_log_loop.py",
            "Log",
            "return tf.math.log(raw_counts), y",
            "safe_log",
        ),
    ],
    ids=["fit-map-divides-by-std", "loop-map-log"],
)
def test_the_pipelines_function_that_wrote_the_batchs_nan_is_named_and_patched(
    doctor_run, script, op, line, family
):
    assert script in CONFIRMED_SCRIPTS
    problem = doctor_run(script).problem
    assert problem["category"] == "bad_input"
    origin = problem["origin"]
    assert (origin["op"], origin["line"]) == (op, line_of(script, line))
    assert "The input pipeline wrote them, in `map(" in problem["explanation"]
    first = problem["fixes"][0]
    assert first["family"] == family
    assert first["verified"] is True, first["evidence"]
    assert first["evidence"].startswith("confirmed: the patched copy of your files trained")
    assert "not tried inside the run" in first["evidence"]
    assert [fix["family"] for fix in problem["fixes"][1:]] == [
        "clean_input",
        "skip_nonfinite_batch",
    ]
