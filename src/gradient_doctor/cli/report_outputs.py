"""Write the report files a run asked for (JSON, HTML, TensorBoard), each on its own."""

from __future__ import annotations

import sys
from collections.abc import Callable

from gradient_doctor.core.report import Report


def write_outputs(
    report: Report,
    report_path: str | None = None,
    html_path: str | None = None,
    tensorboard_dir: str | None = None,
) -> bool:
    """Write each requested output of `report`; one that fails does not stop the others.

    A failure is said on stderr with the path and the reason (the diagnosis on the
    terminal stands either way).

    Args:
        report: Report, the outcome of the run.
        report_path: str or None, where the JSON report goes.
        html_path: str or None, where the HTML report goes.
        tensorboard_dir: str or None, the folder for TensorBoard event files.

    Returns:
        True when every requested output was written.
    """
    writers: list[tuple[str, str, Callable[[Report, str], None]]] = []
    if report_path:
        from gradient_doctor.render.json_report import write_json_report

        writers.append(("the JSON report", report_path, write_json_report))
    if html_path:
        from gradient_doctor.render.html_report import write_html_report

        writers.append(("the HTML report", html_path, write_html_report))
    if tensorboard_dir:
        from gradient_doctor.tf_adapter.export.tensorboard_export import write_tensorboard

        writers.append(("TensorBoard summaries", tensorboard_dir, write_tensorboard))
    written = True
    for what, path, write in writers:
        try:
            write(report, path)
        except Exception as error:  # the doctor's own output: say so, write the rest
            written = False
            hint = " Check that the path is writable." if isinstance(error, OSError) else ""
            print(
                f"gradient-doctor: error: could not write {what} to {path!r} "
                f"({type(error).__name__}: {error}).{hint}",
                file=sys.stderr,
            )
    return written
