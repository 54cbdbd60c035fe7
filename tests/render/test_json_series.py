"""The JSON report's optional `series`: present only with series, plain and bounded."""

import dataclasses
import json
import math

from gradient_doctor.core.records import StepRecord
from gradient_doctor.core.run_series import RunSeries, Series
from gradient_doctor.render.json_report import report_to_dict, write_json_report


def test_no_series_no_key(healthy_report):
    assert "series" not in report_to_dict(healthy_report)


def test_series_are_written_as_parallel_lists(healthy_report, tmp_path):
    collected = RunSeries(points=100)
    for step in range(10_000):
        collected.observe(StepRecord(step, loss=1.0 / (1 + step), grad_norm=float(step)))
    report = dataclasses.replace(healthy_report, series=collected.snapshot())
    path = tmp_path / "report.json"
    write_json_report(report, path)
    loss, norm = json.loads(path.read_text())["series"]
    assert loss["name"] == "loss" and loss["group"] == "Loss" and loss["limit"] is None
    assert norm["scale"] == "log" and norm["unit"] == "L2 norm"
    assert len(loss["steps"]) == len(loss["values"]) <= 101
    assert loss["steps"][0] == 0 and loss["steps"][-1] == 9999
    assert loss["values"][-1] == 1.0 / 10_000
    assert norm["values"] == [float(step) for step in norm["steps"]]


def test_a_non_finite_limit_is_null(healthy_report):
    one = Series("x", "x", "X", limit=math.inf, steps=(0,), values=(1.0,))
    (written,) = report_to_dict(dataclasses.replace(healthy_report, series=(one,)))["series"]
    assert written["limit"] is None
    json.dumps(written, allow_nan=False)
