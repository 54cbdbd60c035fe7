"""The JSON report follows schema gradient-doctor/report/v1, key for key."""

import dataclasses
import json
import math
import os

import pytest

from gradient_doctor.core.findings import Headroom, TensorStats
from gradient_doctor.core.report import Report
from gradient_doctor.render.json_report import report_to_dict, write_json_report
from tests.render.conftest import STABLE_SOFTMAX_PATCH

PROBLEM_KEYS = [
    "category",
    "step",
    "replica",
    "worker",
    "phase",
    "origin",
    "disconnected",
    "explanation",
    "skipped_updates",
    "own_update",
    "not_fixes",
    "fixes",
]
ORIGIN_KEYS = [
    "op",
    "op_name",
    "layer",
    "file",
    "line",
    "code",
    "end_line",
    "source_kind",
    "variable",
    "gradient_of",
    "inputs",
    "outputs",
]
TENSOR_KEYS = ["dtype", "shape", "min", "max", "nan", "inf", "zeros"]


def test_top_level_keys_and_values(problem_report):
    result = report_to_dict(problem_report)

    assert list(result) == [
        "schema",
        "framework",
        "status",
        "script",
        "steps_watched",
        "problems",
        "warnings",
    ]
    assert result["schema"] == "gradient-doctor/report/v1"
    assert result["framework"] == "tensorflow"
    assert result["status"] == "problem"
    assert result["script"] == "train.py"
    assert result["steps_watched"] == 1831
    assert len(result["problems"]) == 2
    assert len(result["warnings"]) == 1


def test_forward_problem_matches_the_contract(problem_report):
    problem = report_to_dict(problem_report)["problems"][0]

    assert list(problem) == PROBLEM_KEYS
    assert list(problem["origin"]) == ORIGIN_KEYS
    assert problem == {
        "category": "forward_overflow",
        "step": 1830,
        "replica": None,
        "worker": None,
        "phase": "forward",
        "origin": {
            "op": "Exp",
            "op_name": "message_passing/Exp",
            "layer": "message_passing",
            "file": "train.py",
            "line": 42,
            "code": "w = tf.exp(scores)",
            "end_line": None,
            "source_kind": "op",
            "variable": None,
            "gradient_of": None,
            "inputs": [
                {
                    "dtype": "float32",
                    "shape": [32, 8],
                    "min": -3.1,
                    "max": 712.4,
                    "nan": 0,
                    "inf": 0,
                    "zeros": 0,
                }
            ],
            "outputs": [
                {
                    "dtype": "float32",
                    "shape": [32, 8],
                    "min": 0.04,
                    "max": 3.0e38,
                    "nan": 0,
                    "inf": 17,
                    "zeros": 0,
                }
            ],
        },
        "disconnected": None,
        "explanation": "The input to Exp reached 712.4; float32 exp overflows above 88.72.",
        "skipped_updates": 0,
        "own_update": False,
        "not_fixes": [
            {
                "remedy": "gradient_clipping",
                "why": "the overflow happens in the forward pass, before any gradient",
                "evidence": None,
                "structural": True,
                "patch": None,
            }
        ],
        "fixes": [
            {
                "family": "stable_softmax",
                "title": "Subtract the row maximum before exp",
                "code": "w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))",
                "patch": STABLE_SOFTMAX_PATCH,
                "verified": True,
                "evidence": "replayed 200 steps from step 1829: all finite",
            }
        ],
    }


def test_backward_problem_names_the_forward_op(problem_report):
    problem = report_to_dict(problem_report)["problems"][1]
    origin = problem["origin"]

    assert problem["phase"] == "backward"
    assert origin["op"] == "SqrtGrad"
    assert origin["gradient_of"] == "Sqrt"
    assert (origin["file"], origin["line"]) == ("critic.py", 12)
    assert origin["code"] == "    norm = tf.norm(grads, axis=1)"
    assert [list(tensor) for tensor in origin["inputs"]] == [TENSOR_KEYS, TENSOR_KEYS]
    assert origin["inputs"][0]["shape"] == [None]
    assert origin["inputs"][0]["zeros"] == 3
    assert origin["outputs"][0]["min"] is None
    assert problem["fixes"][0]["verified"] is None
    assert problem["fixes"][0]["evidence"] is None


def test_warning_adds_forecast_and_headroom(problem_report):
    warning = report_to_dict(problem_report)["warnings"][0]

    assert list(warning) == [*PROBLEM_KEYS, "forecast_step", "headroom"]
    assert warning["step"] == 12
    assert warning["forecast_step"] == 140
    assert warning["headroom"] == {"limit": 88.72, "value": 61.3}


def test_warning_without_headroom_has_nulls(make_finding):
    warning = make_finding("warning", forecast_step=None, headroom=None)
    report = Report(script="train.py", steps_watched=3, warnings=(warning,))

    result = report_to_dict(report)["warnings"][0]

    assert result["forecast_step"] is None
    assert result["headroom"] is None


def test_healthy_report(healthy_report):
    assert report_to_dict(healthy_report) == {
        "schema": "gradient-doctor/report/v1",
        "framework": "tensorflow",
        "status": "healthy",
        "script": "train.py",
        "steps_watched": 500,
        "problems": [],
        "warnings": [],
    }


def test_script_error_appears_only_when_set():
    report = Report(script="train.py", steps_watched=2, script_error="KeyError: 'x'")

    result = report_to_dict(report)

    assert result["status"] == "problem"
    assert result["script_error"] == "KeyError: 'x'"


def test_disconnected_gradients(disconnected_problem):
    report = Report(script="gan.py", steps_watched=1, problems=(disconnected_problem,))

    problem = report_to_dict(report)["problems"][0]

    assert problem["origin"] is None
    assert problem["phase"] is None
    assert problem["disconnected"] == {
        "variables": ["generator/dense/kernel", "generator/dense/bias"],
        "all": True,
        "break": {
            "op": "ArgMax",
            "file": "gan.py",
            "line": 88,
            "code": "tokens = tf.argmax(p, -1)",
        },
    }


def test_missing_source_is_flattened_to_nulls(make_finding, exp_problem):
    origin = dataclasses.replace(exp_problem.origin, source=None)
    report = Report(script=None, steps_watched=1, problems=(make_finding("exp", origin=origin),))

    result = report_to_dict(report)["problems"][0]["origin"]

    assert (result["file"], result["line"], result["code"]) == (None, None, None)


def test_non_finite_floats_become_null(make_finding, exp_problem):
    stats = TensorStats("float16", (2,), float("-inf"), float("nan"), nan=1, inf=1, zeros=0)
    origin = dataclasses.replace(exp_problem.origin, inputs=(stats,))
    warning = make_finding("warning", origin=origin, headroom=Headroom(math.inf, math.nan))
    report = Report(script="train.py", steps_watched=1, warnings=(warning,))

    result = report_to_dict(report)["warnings"][0]

    assert result["origin"]["inputs"][0]["min"] is None
    assert result["origin"]["inputs"][0]["max"] is None
    assert result["origin"]["inputs"][0]["nan"] == 1
    assert result["headroom"] == {"limit": None, "value": None}
    json.dumps(result, allow_nan=False)


def test_written_file_round_trips(problem_report, tmp_path):
    path = tmp_path / "nested" / "folder" / "report.json"

    write_json_report(problem_report, path)

    assert json.loads(path.read_text(encoding="utf-8")) == report_to_dict(problem_report)
    assert os.listdir(path.parent) == ["report.json"]


def test_written_file_is_strict_json_with_non_finite_values(make_finding, tmp_path):
    stats = TensorStats("float32", (1,), math.nan, math.inf, nan=1, inf=1, zeros=0)
    origin = dataclasses.replace(make_finding("exp").origin, outputs=(stats,))
    report = Report(
        script="train.py", steps_watched=1, problems=(make_finding("exp", origin=origin),)
    )
    path = tmp_path / "report.json"

    write_json_report(report, str(path))

    def reject(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    result = json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)
    assert result["problems"][0]["origin"]["outputs"][0]["max"] is None


def test_rewriting_replaces_the_old_report(problem_report, healthy_report, tmp_path):
    path = tmp_path / "report.json"
    write_json_report(problem_report, path)

    write_json_report(healthy_report, path)

    assert json.loads(path.read_text(encoding="utf-8"))["status"] == "healthy"
    assert sorted(os.listdir(tmp_path)) == ["report.json"]


def test_failed_write_leaves_no_temporary_file(problem_report, tmp_path, monkeypatch):
    path = tmp_path / "report.json"

    def fail(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_json_report(problem_report, path)
    assert os.listdir(tmp_path) == []
