"""From evidence to a finding: the knowledge base's diagnosis, never one that ends the run."""

from __future__ import annotations

import warnings
from dataclasses import replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rules import default as default_rule
from gradient_doctor.core.knowledge.wording import replica_note
from gradient_doctor.core.pipeline.adapter import ReplicaPlace


def diagnosed(evidence: Evidence) -> Finding:
    """The finding the knowledge base makes of `evidence`; the generic one, with a
    warning, when a rule fails (a gap in the knowledge base must not end the user's run).

    The one diagnosis of the pipeline: a run's failing step, its missing and zero
    gradients, and a replayed crash dump all go through it.
    """
    try:
        diagnosis = diagnose(evidence)
    except Exception as error:
        warnings.warn(
            f"gradient-doctor could not explain step {evidence.step} "
            f"({type(error).__name__}: {error}); giving the generic diagnosis.",
            stacklevel=2,
        )
        diagnosis = default_rule.diagnose(evidence)
    return diagnosis.finding(evidence)


def at_replica(finding: Finding, replica: int, place: ReplicaPlace) -> Finding:
    """The finding saying which replica saw the first non-finite value, and where it ran."""
    note = " ".join(filter(None, (replica_note(replica, place.replicas), place.note)))
    return replace(
        finding,
        explanation=f"{finding.explanation} {note}",
        replica=replica,
        worker=place.worker,
    )
