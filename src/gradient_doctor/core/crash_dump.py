"""What every crash dump says, whatever the framework: its manifest, the writer's messages,
and a replay's outcome.

The adapter writes the failing step its own way (`tf_adapter/dump/`,
`torch_adapter/dump/`) and replays it into evidence; the manifest around it, the lines
the run prints about it, and what `gradient-doctor replay` compares are the same for
both.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gradient_doctor.core.dump_folder import FORMAT, VERSION, DumpError, check_new_dump_directory
from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding


def dump_manifest(
    framework: str,
    versions: dict[str, str],
    finding: Finding,
    problem: dict[str, Any],
    evidence: Evidence,
    script: str | None,
) -> dict[str, Any]:
    """The manifest's own fields: format, framework, versions, when, the script, the
    step, the finding as the JSON report has it (`problem`, from the renderer's
    `problem_to_dict`), and the context its diagnosis reads."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "framework": framework,
        "versions": versions,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "script": script,
        "step": finding.step,
        "finding": problem,
        "context": {
            "history": json_safe(dataclasses.asdict(evidence.history)),
            "setup": json_safe(dataclasses.asdict(evidence.setup)),
        },
    }


def restored_context(manifest: dict[str, Any]) -> tuple[StepHistory, TrainingSetup]:
    """The history and training setup a dump's manifest recorded, for the replay's diagnosis."""
    context = manifest.get("context") or {}
    return _restore(StepHistory, context.get("history")), _restore(
        TrainingSetup, context.get("setup")
    )


def _restore(cls, values: dict | None):
    """A context dataclass from its JSON fields (fields this version lacks are left out)."""
    known = {field.name for field in fields(cls)}
    kwargs = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in (values or {}).items()
        if key in known
    }
    return cls(**kwargs)


def json_safe(value):
    """`value` with tuples as lists, non-finite floats as None (JSON has neither) and
    NumPy's scalars as Python's."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int) or hasattr(type(value), "__index__"):
        return int(value)
    if isinstance(value, float) or hasattr(type(value), "__float__"):
        number = float(value)
        return number if math.isfinite(number) else None
    return value


class DumpTarget:
    """Where `--dump DIR` writes, and what the run says about it.

    Args:
        directory: str or path-like, the dump folder; it must not exist or be empty.
        script: str or None, the training script as the user named it.

    Raises:
        DumpError: `directory` is a file or a folder that holds anything.
    """

    def __init__(self, directory, script: str | None = None) -> None:
        check_new_dump_directory(directory)
        self.directory = Path(directory)
        self.script = script
        self.written: Path | None = None
        self.asked = False  # a non-finite step was found (dumped or not)

    def attempt(
        self, step: int, write: Callable[[], Path], expected: tuple[type[Exception], ...] = ()
    ) -> None:
        """Write the dump of `step` with `write`; say it was written, or warn why not. Never
        raises: the dump is extra, the user's run goes on.

        Args:
            step: the failing step dumped.
            write: writes the dump and returns its folder.
            expected: the errors whose message is reason enough (with `DumpError`
                and `OSError`); any other is named by its type too.
        """
        try:
            self.written = write()
        except (DumpError, OSError, *expected) as error:
            self.warn(str(error))
            return
        except Exception as error:  # the dump is extra: never end the user's run over it
            self.warn(f"{type(error).__name__}: {error}")
            return
        self.announce(step)

    def announce(self, step: int) -> None:
        """Say the dump of `step` was written, and how to replay it."""
        print(
            f"gradient-doctor: crash dump of step {step} written to {self.directory}; "
            f"replay it anywhere with `gradient-doctor replay {self.directory}`",
            file=sys.stderr,
        )

    def warn(self, why: str) -> None:
        """Say the dump could not be written, and why (the run goes on)."""
        warnings.warn(
            f"gradient-doctor could not write the crash dump to {str(self.directory)!r}: {why}.",
            stacklevel=3,
        )

    def finish(self) -> None:
        """At the end of the run, say so when no step ever needed dumping (nothing was written)."""
        if not self.asked:
            print(
                f"gradient-doctor: no crash dump written to {self.directory}: no step had "
                "non-finite values",
                file=sys.stderr,
            )


@dataclass(frozen=True)
class DumpReplay:
    """The outcome of replaying a dump.

    Attributes:
        manifest: the dump's manifest (versions, script, step, the run's finding).
        finding: the diagnosis of the replayed step.
        reproduced: the replayed step produced non-finite values again.
        stopped: why the replay ended before the step's last op, or None when it ran
            whole (a value the dump left out, an op this build lacks).
    """

    manifest: dict[str, Any]
    finding: Finding
    reproduced: bool
    stopped: str | None = None

    @property
    def dumped_finding(self) -> dict[str, Any]:
        """The run's own finding, as its JSON report had it."""
        return self.manifest.get("finding") or {}
