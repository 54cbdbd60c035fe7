"""The patch that turns XLA off: the user's compile line or step decorator, as written."""

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.xla import compile_without_xla
from gradient_doctor.core.patches import apply_edits

SCRIPT = """import tensorflow as tf

model.compile(optimizer="sgd", loss="mse", jit_compile=True)  # fast
model.compile(
    optimizer="adam",
    loss="mse",
)


@tf.function(jit_compile=True, reduce_retracing=True)
def train_step(x, y):
    return x
""".splitlines(keepends=True)


def _turned_off(first: str, last: str | None = None) -> list[str]:
    line = next(n for n, code in enumerate(SCRIPT, 1) if first in code)
    end = (
        next(n for n, code in enumerate(SCRIPT, 1) if n >= line and last in code) if last else None
    )
    source = SourceLine("train.py", line, SCRIPT[line - 1].strip(), end_line=end)
    edit = compile_without_xla(source, SCRIPT)
    assert edit is not None
    return [text.rstrip("\n") for text in apply_edits(SCRIPT, [edit])]


def test_a_compile_line_that_turned_xla_on_turns_it_off_and_keeps_its_comment():
    assert _turned_off("jit_compile=True)  # fast")[2] == (
        'model.compile(optimizer="sgd", loss="mse", jit_compile=False)  # fast'
    )


def test_a_compile_call_over_several_lines_that_left_it_to_auto_gets_the_keyword():
    patched = _turned_off("model.compile(\n", ")")
    assert "jit_compile=False" in "".join(patched[3:8]), patched[3:8]
    compile("\n".join(patched), "train.py", "exec")


def test_a_step_decorator_keeps_its_other_arguments():
    assert _turned_off("@tf.function")[9] == (
        "@tf.function(jit_compile=False, reduce_retracing=True)"
    )


def test_a_line_with_no_compiling_call_gets_no_patch():
    source = SourceLine("train.py", 1, "import tensorflow as tf")
    assert compile_without_xla(source, SCRIPT) is None
