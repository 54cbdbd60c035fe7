"""Two real MultiWorkerMirroredStrategy worker processes on localhost, through the real CLI.

Two clusters run at once, each of two workers with its own TF_CONFIG: one under
`gradient-doctor run` (a report per worker), one plain, as the reference.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, doctor_command, line_of

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/multi_worker_log_domain.py"
WORKERS = 2
# Longest a worker may take (TensorFlow's import alone takes 10 s on a busy machine).
TIMEOUT_S = 180


@dataclass(frozen=True)
class Worker:
    """What one worker process left: its exit status, its printed lines and its report."""

    exit_code: int
    stdout: str
    stderr: str
    report: dict | None

    def losses(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith("step ")]


def _free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 nobody listens on (all held open until every one is chosen)."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for held in sockets:
            held.bind(("127.0.0.1", 0))
        return [held.getsockname()[1] for held in sockets]


def _start(command_of, folder: Path, ports: list[int]) -> list[tuple[subprocess.Popen, Path]]:
    """Start one cluster: worker i runs `command_of(i)` with TF_CONFIG naming all of them."""
    folder.mkdir()
    addresses = [f"127.0.0.1:{port}" for port in ports]
    started = []
    for index in range(WORKERS):
        config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(config)}
        out = (folder / f"stdout.{index}").open("w")
        err = (folder / f"stderr.{index}").open("w")
        process = subprocess.Popen(command_of(index), cwd=ROOT, env=env, stdout=out, stderr=err)
        out.close()
        err.close()
        started.append((process, folder / f"report.{index}.json"))
    return started


def _finish(started) -> list[Worker]:
    workers = []
    for index, (process, report) in enumerate(started):
        code = process.wait(timeout=TIMEOUT_S)
        folder = report.parent
        workers.append(
            Worker(
                code,
                (folder / f"stdout.{index}").read_text(),
                (folder / f"stderr.{index}").read_text(),
                json.loads(report.read_text()) if report.exists() else None,
            )
        )
    return workers


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """(the doctor's workers, the plain run's workers), both clusters run at once."""
    tmp = tmp_path_factory.mktemp("multi_worker")
    doctor, plain = tmp / "doctor", tmp / "plain"
    ports = _free_ports(2 * WORKERS)  # chosen together: no two clusters share one
    started = []
    try:
        started += _start(
            lambda i: [
                *doctor_command(),
                "run",
                "--report",
                str(doctor / f"report.{i}.json"),
                SCRIPT,
            ],
            doctor,
            ports[:WORKERS],
        )
        started += _start(lambda i: [sys.executable, SCRIPT], plain, ports[WORKERS:])
        yield _finish(started[:WORKERS]), _finish(started[WORKERS:])
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_every_worker_stops_at_the_failing_step_and_writes_its_report(clusters):
    doctor, _ = clusters
    for worker in doctor:
        assert worker.exit_code == 1, worker.stderr[-3000:]
        assert worker.report is not None and worker.report["status"] == "problem"
        # Step 3 was the last one run: its update was skipped and training stopped.
        assert worker.report["steps_watched"] == 4
        assert [line.split()[1] for line in worker.losses()] == ["0", "1", "2"]
        assert "weights finite" not in worker.stdout


def test_every_report_names_the_worker_replica_op_and_line(clusters):
    doctor, _ = clusters
    for index, worker in enumerate(doctor):
        problem = worker.report["problems"][0]
        assert (problem["category"], problem["step"], problem["phase"]) == (
            "forward_domain",
            3,
            "forward",
        )
        assert (problem["replica"], problem["worker"]) == (1, {"type": "worker", "index": 1})
        origin = problem["origin"]
        assert (origin["op"], origin["source_kind"]) == ("Log", "op")
        assert origin["line"] == line_of(SCRIPT, "return tf.math.log(inputs)")
        assert origin["inputs"][0]["shape"] == [8, 4]  # worker 1's shard, replayed here too
        assert origin["inputs"][0]["zeros"] == 1
        assert "ran on task worker:1" in problem["explanation"]
        # The chief replayed worker 1's shard with worker 1's draws of the jitter.
        assert origin["inputs"] == doctor[1].report["problems"][0]["origin"]["inputs"]
        assert f"This report is task worker:{index}'s." in problem["explanation"]


def test_fix_trials_are_not_run_under_the_strategy(clusters):
    doctor, _ = clusters
    for worker in doctor:
        fixes = {fix["family"]: fix for fix in worker.report["problems"][0]["fixes"]}
        assert fixes["safe_log"]["verified"] is None
        assert "tf.distribute strategy" in fixes["safe_log"]["evidence"]


def test_the_steps_before_the_failing_one_are_unchanged_and_the_failure_is_real(clusters):
    doctor, plain = clusters
    for watched, reference in zip(doctor, plain):
        assert reference.exit_code == 0, reference.stderr[-3000:]
        assert watched.losses() == reference.losses()[:3]
        assert reference.losses()[3] == "step 3 loss nan"  # unwatched, the update broke
        assert "weights finite: False" in reference.stdout
