"""Export a run's report to TensorBoard: its series as scalars, its findings as text."""

from __future__ import annotations

import os

import tensorflow as tf
from tensorflow.core.framework.summary_pb2 import DataClass, SummaryMetadata

from gradient_doctor.core.report import Report
from gradient_doctor.errors import DoctorError
from gradient_doctor.render.text import format_finding_lines, header_line, warning_lines

# A series' limit is written under the series' tag with this suffix, so TensorBoard
# shows it in the same section as the values it bounds.
LIMIT_SUFFIX = "_limit"
# Summaries are written with `tf.summary.write` and the metadata TensorBoard's scalar
# and text plugins read (plugin name, data class; their plugin data is empty at version
# 0), so the export needs TensorFlow only: `tf.summary.scalar` lives in the tensorboard
# package, which TensorFlow's CPU wheels do not install.
_SCALAR = SummaryMetadata(
    plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=DataClass.DATA_CLASS_SCALAR,
)
_TEXT = SummaryMetadata(
    plugin_data=SummaryMetadata.PluginData(plugin_name="text"),
    data_class=DataClass.DATA_CLASS_TENSOR,
)


class TensorBoardExportError(DoctorError):
    """The report could not be written as TensorBoard summaries."""


def write_tensorboard(report: Report, logdir: str | os.PathLike[str]) -> None:
    """Write the report's series and findings as TensorBoard summaries in `logdir`.

    Each `Series` becomes the scalar tag `series.name` (e.g. "loss",
    "grad_norm/global", "headroom/message_passing/Exp") at its steps; a series with
    a limit also gets "<name>_limit" at its first and last step (a flat line). The
    status is the text tag "gradient_doctor/status" at step 0; each problem and warning
    is a text tag ("gradient_doctor/problem_1", "gradient_doctor/warning_1") at its step.

    Runs after training, so it never touches what training computed; it uses a writer
    of its own, whatever summary writer or recording condition the script left set.

    Args:
        report: Report, the outcome of a watched run (crashed runs included).
        logdir: str or path-like, the folder for the event file (created if needed).

    Raises:
        TensorBoardExportError: when the script disabled eager execution (summaries
            would only be graph ops that never run).
        OSError, tf.errors.OpError: when the folder cannot be written.
    """
    if not tf.executing_eagerly():
        raise TensorBoardExportError(
            "cannot write TensorBoard summaries: the script disabled eager execution "
            "(tf.compat.v1.disable_eager_execution). Use --report or --html instead."
        )
    os.makedirs(logdir, exist_ok=True)
    writer = tf.summary.create_file_writer(os.fspath(logdir))
    try:
        with writer.as_default(), tf.summary.record_if(True):
            _write_series(report)
            _write_findings(report)
        writer.flush()
    finally:
        writer.close()


def _write_series(report: Report) -> None:
    for series in report.series:
        for step, value in zip(series.steps, series.values):
            _scalar(series.name, value, step)
        if series.limit is not None and series.steps:
            for step in sorted({series.steps[0], series.steps[-1]}):
                _scalar(series.name + LIMIT_SUFFIX, series.limit, step)


def _scalar(tag: str, value: float, step: int) -> None:
    tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=_SCALAR)


def _text(tag: str, text: str, step: int) -> None:
    tf.summary.write(tag, tf.constant(text, tf.string), step=step, metadata=_TEXT)


def _write_findings(report: Report) -> None:
    status = header_line(report)
    if report.script_error is not None:
        status += f"\n\nthe script raised: {report.script_error}"
    _text("gradient_doctor/status", status, 0)
    for number, finding in enumerate(report.problems, start=1):
        text = _preformatted(format_finding_lines(finding))
        _text(f"gradient_doctor/problem_{number}", text, finding.step or 0)
    for number, finding in enumerate(report.warnings, start=1):
        text = _preformatted(warning_lines(finding))
        _text(f"gradient_doctor/warning_{number}", text, finding.step or 0)


def _preformatted(lines: list[str]) -> str:
    """Lines as a Markdown code block (TensorBoard renders text as Markdown), indent kept."""
    return "\n".join("    " + line for line in lines)
