"""Every private TensorFlow and Keras internal the doctor touches still exists and behaves
as the doctor reads it: an upgrade that moves one fails here, by name."""

import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from gradient_doctor.tf_adapter import _tf_internals as internals  # noqa: E402
from gradient_doctor.tf_adapter.step.random_draws import _DRAWING  # noqa: E402

# module or class exported -> the attributes the doctor reads or swaps on it
_ATTRIBUTES = {
    "pywrap_tfe": ("TFE_Py_TapeSetIsEmpty", "TFE_Py_TapeSetIsStopped"),
    "record": ("record_operation",),
    "op_callbacks": ("add_op_callback", "remove_op_callback"),
    "polymorphic_function": ("Function",),
    "tf_stack": ("extract_stack",),
    "ops": ("_EagerTensorBase", "_gradient_registry"),
    "context": ("context",),
    "execute": ("execute", "record_gradient"),
    "op_def_registry": ("get",),
    "resource_variable_ops": ("BaseResourceVariable",),
    "gen_resource_variable_ops": ("assign_variable_op", "read_variable_op", "var_handle_op"),
    "gen_random_ops": tuple(sorted(set(_DRAWING.values()))),
    "control_flow_util": ("GraphOrParentsInXlaContext",),
    "ag_ctx": ("ControlStatusCtx", "Status", "control_status_ctx"),
    "converter": ("ConversionOptions",),
    "autograph": ("converted_call", "tf_convert"),
    "global_state": ("get_global_attribute",),
    "KerasVariable": ("assign",),
    "BaseOptimizer": ("__init__", "apply", "apply_gradients"),
    "keras_backend": ("name_scope",),
    "keras_nn": (
        "binary_crossentropy",
        "categorical_crossentropy",
        "sparse_categorical_crossentropy",
    ),
}


@pytest.mark.parametrize("name", sorted(_ATTRIBUTES))
def test_each_internal_has_what_the_doctor_reads(name):
    owner = getattr(internals, name)
    missing = [attribute for attribute in _ATTRIBUTES[name] if not hasattr(owner, attribute)]
    assert not missing, f"{name} lacks {missing} in this TensorFlow/Keras version"


def test_the_exported_classes_are_the_ones_training_uses():
    variable = keras.Variable(1.0)
    assert isinstance(variable, internals.KerasVariable)
    assert isinstance(keras.optimizers.SGD(), internals.BaseOptimizer)
    assert isinstance(tf.constant(1.0), internals.ops._EagerTensorBase)
    assert isinstance(tf.distribute.get_strategy(), internals.StrategyBase)
    assert internals.gradient_registry().lookup("Sqrt") is not None
    assert internals.op_def_registry.get("Sqrt") is not None


def test_the_iteration_counter_is_the_variable_apply_adds_to():
    optimizer = keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)
    weight = keras.Variable([1.0])
    optimizer.build([weight])
    counter = internals.iteration_counter(optimizer)
    for _ in range(3):
        optimizer.apply([tf.constant([1.0])], [weight])
    assert int(counter.numpy()) == 3  # every call counted
    assert int(optimizer.iterations.numpy()) == 1  # the public count divides it


def test_the_mapped_functions_of_a_pipeline_are_found_from_the_source_on():
    def scale(x):
        return x * 2.0

    def shift(x):
        return x + 1.0

    source = tf.data.Dataset.range(4).map(lambda i: tf.cast(i, tf.float32))
    pipeline = source.map(scale).shuffle(4, seed=0).map(shift, num_parallel_calls=2).batch(2)
    stages = internals.mapped_functions(pipeline)
    assert [function for _, function in stages][1:] == [scale, shift]
    reads = stages[1][0]
    assert [float(v) for v in reads] == [0.0, 1.0, 2.0, 3.0]  # what `scale` maps over
    assert internals.mapped_functions(tf.data.Dataset.range(3)) == []
    # Through a zip and a concatenate: each branch's maps, sources first.
    labels = source.map(shift)
    zipped = tf.data.Dataset.zip((source.map(scale), labels)).concatenate(
        tf.data.Dataset.zip((source, labels))
    )
    functions = [function for _, function in internals.mapped_functions(zipped)]
    assert functions.count(scale) == 1 and functions.count(shift) == 1


def test_the_attribute_readers_answer_from_a_real_optimizer_tape_and_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.25)
    assert internals.trainable_variables_of(optimizer) == []  # not built yet
    optimizer.build(model.trainable_variables)
    assert [id(v) for v in internals.trainable_variables_of(optimizer)] == [
        id(v) for v in model.trainable_variables
    ]
    rate = internals.learning_rate_variable(optimizer)
    assert float(rate.numpy()) == 0.25
    internals.set_learning_rate_variable(optimizer, 0.5)
    assert float(optimizer.learning_rate) == 0.5
    internals.set_learning_rate_variable(optimizer, rate)
    assert float(optimizer.learning_rate) == 0.25
    layers = internals.flat_layers(model)
    assert layers[0] is model and set(model.layers) <= set(layers)
    with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        assert internals.tape_flags(tape) == (True, False, True)
    graph = tf.Graph()
    with graph.as_default():
        first, second = tf.constant(1.0), tf.constant(2.0)
    assert internals.op_id(first.op) < internals.op_id(second.op)


def test_the_gradient_registry_can_be_swapped_and_put_back():
    original = internals.gradient_registry()

    class Wrapping:
        looked_up: list = []

        def __getattr__(self, name):
            return getattr(original, name)

        def lookup(self, name):
            self.looked_up.append(name)
            return original.lookup(name)

    wrapping = Wrapping()
    internals.set_gradient_registry(wrapping)
    try:
        x = tf.Variable(4.0)
        with tf.GradientTape() as tape:
            y = tf.sqrt(x)
        assert abs(float(tape.gradient(y, x)) - 0.25) < 1e-7
    finally:
        internals.set_gradient_registry(original)
    assert "Sqrt" in wrapping.looked_up
    assert internals.gradient_registry() is original


def test_the_keras_layer_path_is_read_inside_a_layer_call():
    assert internals.current_name_scope_path is not None
    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(internals.current_name_scope_path())
            return x

    keras.Sequential([keras.Input((2,)), Probe(name="probe")])(tf.ones((1, 2)))
    assert seen and all("probe" in path for path in seen)


def test_no_other_module_of_the_doctor_imports_a_private_module():
    from pathlib import Path

    package = Path(internals.__file__).resolve().parents[1]
    private = ("tensorflow.python", "keras.src")
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "_tf_internals.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            words = line.split()
            if words[:1] in (["from"], ["import"]) and any(
                words[1] == name or words[1].startswith(name + ".") for name in private
            ):
                offenders.append(f"{path.relative_to(package)}:{number}: {line.strip()}")
    assert not offenders, "import them through _tf_internals:\n" + "\n".join(offenders)
