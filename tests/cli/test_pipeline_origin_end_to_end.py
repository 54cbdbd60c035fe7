"""NaN the user's own input pipeline wrote into the batch: the pipeline's function is
replayed op by op, its op named on its line, and the patch of that line proved by a
rerun of the patched copy (the step's trial cannot run a patched pipeline)."""

import pytest

from tests.conftest import CONFIRMED_SCRIPTS, line_of

pytestmark = pytest.mark.slow


def test_a_fit_pipelines_map_that_divides_by_a_zero_std_is_named_and_its_patch_holds(doctor_run):
    script = "tests/scripts/pipeline_map_flat_windows.py"
    assert script in CONFIRMED_SCRIPTS
    problem = doctor_run(script).problem
    assert problem["category"] == "bad_input"
    origin = problem["origin"]
    line = "window = (window - tf.reduce_mean(window)) / tf.math.reduce_std(window)"
    assert (origin["op"], origin["line"]) == ("RealDiv", line_of(script, line))
    assert (origin["source_kind"], problem["phase"]) == ("input_pipeline", None)
    assert (
        "The input pipeline wrote them, in `map(standardise)`, replayed here"
        in (problem["explanation"])
    )
    first = problem["fixes"][0]
    assert first["family"] == "safe_div"
    assert first["verified"] is True, first["evidence"]
    assert first["evidence"].startswith("confirmed: the patched copy of your files trained")
    assert "not tried inside the run" in first["evidence"]
    assert [fix["family"] for fix in problem["fixes"][1:]] == [
        "clean_input",
        "skip_nonfinite_batch",
    ]


def test_a_loops_pipeline_held_in_a_local_is_found_and_its_log_named(doctor_run):
    # The dataset is a local of `main`, found in the frames on the stack at the failure.
    script = "tests/scripts/pipeline_map_log_loop.py"
    problem = doctor_run(script).problem
    assert problem["category"] == "bad_input"
    origin = problem["origin"]
    line = line_of(script, "return tf.math.log(raw_counts), y")
    assert (origin["op"], origin["line"]) == ("Log", line)
    assert "in `map(featurize)`" in problem["explanation"]
    assert "The input to Log reached 0 (1 exact zero)" in problem["explanation"]
    first = problem["fixes"][0]
    assert first["family"] == "safe_log"
    assert "+    return tf.math.log(tf.maximum(raw_counts, 1e-7)), y" in first["patch"]
