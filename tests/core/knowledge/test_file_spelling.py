"""A rewrite's TensorFlow names, spelled as the user's file can say them: a patch that
wrote `tf.` into a file that never imports TensorFlow would fail with a NameError."""

from gradient_doctor.core.knowledge.source.spelling import in_files_names

REWRITE = ("mean = tf.math.divide_no_nan(total, count)", "y = tf.exp(tf.clip_by_value(x, -9, 9))")


def _file(*imports: str) -> list[str]:
    return [f"{line}\n" for line in (*imports, "", "x = 1")]


def test_a_file_that_imports_only_keras_ops_gets_keras_ops_helpers():
    assert in_files_names(REWRITE, _file("from keras import ops")) == (
        "mean = ops.divide_no_nan(total, count)",
        "y = ops.exp(ops.clip(x, -9, 9))",
    )
    assert in_files_names(REWRITE[:1], _file("import keras")) == (
        "mean = keras.ops.divide_no_nan(total, count)",
    )


def test_a_file_that_says_tf_or_names_tensorflow_otherwise_keeps_or_renames_it():
    assert in_files_names(REWRITE, _file("import tensorflow as tf", "import keras")) == REWRITE
    compat = _file("import tensorflow.compat.v1 as tf", "from keras import ops")
    assert in_files_names(REWRITE, compat) == REWRITE
    assert in_files_names(REWRITE[:1], _file("import tensorflow")) == (
        "mean = tensorflow.math.divide_no_nan(total, count)",
    )


def test_a_file_that_does_not_parse_or_imports_neither_is_left_as_written():
    assert in_files_names(REWRITE, ["def broken(:\n"]) == REWRITE
    assert in_files_names(REWRITE, _file("import numpy as np")) == REWRITE
