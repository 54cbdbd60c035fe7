"""`--dump DIR` for a PyTorch script: the failing step the seeded rerun recorded, written
as a dump `gradient-doctor replay DIR` runs anywhere, without the script.

The rerun records the step under the `TapedRecorder` and writes its ops and leaves
(`tape_files`) to a folder of its own; here, once the run diagnosed the step, those
files move into the dump with the manifest (the finding as the JSON report has it, the
versions, what was left out).
"""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

from gradient_doctor.core.crash_dump import DumpTarget, dump_manifest
from gradient_doctor.core.dump_folder import write_dump_folder
from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding
from gradient_doctor.torch_adapter.dump.tape_files import HOLDS, read_left_out, tape_problem


class TorchCrashDump(DumpTarget):
    """Writes one dump, at the first failing step the rerun recorded (the folder and
    script as `DumpTarget` takes them)."""

    @property
    def wanted(self) -> bool:
        """Whether the next failing step's rerun should record its tape."""
        return self.written is None

    def write(
        self, finding: Finding, evidence: Evidence, tape: Path | None, why: str | None
    ) -> None:
        """Write the dump of `finding` from the rerun's `tape` folder (moved, not copied).

        Args:
            finding: the diagnosed failing step.
            evidence: its evidence (the history and setup the diagnosis read).
            tape: the folder the rerun wrote its tape to, or None (`why` says why).
            why: why there is no tape.
        """
        self.asked = True
        if self.written is not None:
            return
        why = why if tape is None else tape_problem(tape)
        if why is not None:
            self.warn(why)
            return
        self.attempt(finding.step, lambda: self._write(finding, evidence, tape))

    def _write(self, finding: Finding, evidence: Evidence, tape: Path) -> Path:
        from gradient_doctor.render.json_report import problem_to_dict

        manifest = dump_manifest(
            "torch", versions(), finding, problem_to_dict(finding), evidence, self.script
        )
        manifest["left_out"] = read_left_out(tape)
        return write_dump_folder(self.directory, manifest, lambda staging: _moved(tape, staging))


def _moved(tape: Path, staging: Path) -> dict[str, str]:
    """Move the tape's files into the staged dump; what each holds."""
    for name in HOLDS:
        shutil.move(tape / name, staging / name)
    return dict(HOLDS)


def versions() -> dict[str, str]:
    """The versions a dump's reader may need to know about."""
    import safetensors
    import torch

    from gradient_doctor import __version__

    return {
        "gradient_doctor": __version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "python": platform.python_version(),
    }
