"""Patches of the lines that built the layers and of the fit line, in the user's terms."""

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.data import scale_fit_input, standardise_fit_input
from gradient_doctor.core.knowledge.rewrites.layer import (
    LayerSite,
    constrain_kernel,
    he_initialised,
    orthogonal_recurrence,
    wants_he_init,
    wants_orthogonal_recurrence,
)
from gradient_doctor.core.patches import apply_edits

SCRIPT = """from tensorflow import keras

hidden = [keras.layers.Dense(64, activation="relu") for _ in range(4)]
head = keras.layers.Dense(1, kernel_initializer="zeros")
model.fit(features, prices, validation_data=(val_x, val_y), epochs=3)
model.fit(features / 255.0, prices)
autoencoder.fit(pixels, pixels, validation_data=(held_out, held_out), epochs=2)
rnn = keras.layers.SimpleRNN(8, activation="relu", recurrent_initializer=Orthogonal(gain=4.0))
sparse = keras.layers.Dense(32, activation="relu", bias_initializer=Constant(-8.0))
def build():
    pair = [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
""".splitlines(keepends=True)


def _at(text):
    line = next(n for n, code in enumerate(SCRIPT, 1) if text in code)
    return SourceLine("train.py", line, SCRIPT[line - 1].strip())


def _patched(edit) -> list[str]:
    return [line.rstrip("\n") for line in apply_edits(SCRIPT, [edit])]


def test_of_two_layers_built_on_one_line_the_one_at_the_recorded_column_is_patched():
    at = _at("pair =")
    column = at.code.index("keras.layers.Dense(1)")
    site = LayerSite(
        SourceLine(at.file, at.line, at.code, column, column + len("keras.layers.Dense(1)")),
        "Dense",
        "sequential/dense_2",
    )
    assert (
        '    pair = [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1, '
        "kernel_constraint=keras.constraints.MaxNorm(max_value=3.0))]"
    ) in _patched(constrain_kernel(site, SCRIPT))
    unplaced = LayerSite(at, "Dense", "sequential/dense_2")  # no column: the first, as before
    assert 'keras.layers.Dense(64, activation="relu", kernel_constraint' in "".join(
        _patched(constrain_kernel(unplaced, SCRIPT))
    )


def test_he_init_goes_where_the_layers_were_built_once_for_a_comprehension():
    site = LayerSite(_at("for _ in range(4)"), "Dense", "sequential/dense", "relu", "GlorotUniform")
    assert wants_he_init(site)
    assert (
        'hidden = [keras.layers.Dense(64, activation="relu", kernel_initializer="he_normal") '
        "for _ in range(4)]"
    ) in _patched(he_initialised(site, SCRIPT))


def test_biases_a_constant_put_below_the_relus_threshold_start_at_zero_with_he_init():
    # Dense layers with `bias_initializer=Constant(-8.0)`: every ReLU dead from step 0, and
    # He's kernels alone left them so (the patch run plain: accuracy 0.30, as the run's).
    site = LayerSite(_at("sparse ="), "Dense", "dense_5", "relu", "GlorotUniform", None, None, -8.0)
    assert wants_he_init(site)
    assert (
        'sparse = keras.layers.Dense(32, activation="relu", bias_initializer="zeros", '
        'kernel_initializer="he_normal")'
    ) in _patched(he_initialised(site, SCRIPT))
    positive = LayerSite(
        _at("sparse ="), "Dense", "dense_5", "relu", "GlorotUniform", None, None, 0.1
    )
    assert 'bias_initializer="zeros"' not in "".join(_patched(he_initialised(positive, SCRIPT)))


def test_an_initializer_the_user_chose_is_left_alone():
    site = LayerSite(_at("head ="), "Dense", "sequential/dense_4", None, "Zeros")
    assert not wants_he_init(site)
    assert he_initialised(site, SCRIPT) is None


def test_weight_bounds_use_the_files_own_keras_name():
    site = LayerSite(_at("head ="), "Dense", "sequential/dense_4")
    assert (
        'head = keras.layers.Dense(1, kernel_initializer="zeros", '
        "kernel_constraint=keras.constraints.MaxNorm(max_value=3.0))"
    ) in _patched(constrain_kernel(site, SCRIPT))


def test_the_fit_line_standardises_x_and_the_validation_x_by_the_training_statistics():
    edit = standardise_fit_input(_at("validation_data"), SCRIPT)
    wide = 'axis=0, dtype="float64"'
    mean, std = f"features.mean({wide})", f"(features.std({wide}) + 1e-07)"
    assert (
        f"model.fit((features - {mean}) / {std}, prices, "
        f"validation_data=((val_x - {mean}) / {std}, val_y), epochs=3)"
    ) in _patched(edit)


def test_the_fit_line_standardises_the_targets_and_the_validation_targets_alike():
    edit = standardise_fit_input(_at("validation_data"), SCRIPT, part="y")
    wide = 'axis=0, dtype="float64"'
    mean, std = f"prices.mean({wide})", f"(prices.std({wide}) + 1e-07)"
    assert (
        f"model.fit(features, (prices - {mean}) / {std}, "
        f"validation_data=(val_x, (val_y - {mean}) / {std}), epochs=3)"
    ) in _patched(edit)


def test_an_autoencoders_targets_are_standardised_with_its_inputs():
    # fit(x, x): standardised inputs asked to reproduce the raw ones still learn raw scale.
    edit = standardise_fit_input(_at("autoencoder.fit"), SCRIPT)
    wide = 'axis=0, dtype="float64"'
    mean, std = f"pixels.mean({wide})", f"(pixels.std({wide}) + 1e-07)"
    inputs, held = f"(pixels - {mean}) / {std}", f"(held_out - {mean}) / {std}"
    assert (
        f"autoencoder.fit({inputs}, {inputs}, validation_data=({held}, {held}), epochs=2)"
    ) in _patched(edit)


def test_an_expression_passed_as_x_is_not_rewritten():
    assert standardise_fit_input(_at("features / 255.0"), SCRIPT) is None


def _cell(initializer, gain):
    return LayerSite(
        _at("SimpleRNN("), "SimpleRNNCell", "rnn/simple_rnn_cell", "relu", None, initializer, gain
    )


def test_a_recurrent_kernel_that_grows_the_state_is_drawn_orthogonal_on_the_rnns_line():
    # The cell Keras built is found by the recurrent layer's call that built it.
    site = _cell("Orthogonal", 4.0)
    assert wants_orthogonal_recurrence(site)
    assert (
        'rnn = keras.layers.SimpleRNN(8, activation="relu", recurrent_initializer="orthogonal")'
    ) in _patched(orthogonal_recurrence(site, SCRIPT))


def test_a_recurrent_kernel_that_keeps_the_scale_is_left_alone():
    assert not wants_orthogonal_recurrence(_cell("Orthogonal", 1.0))  # Keras's default
    assert not wants_orthogonal_recurrence(_cell("Identity", 1.0))  # an IRNN
    assert wants_orthogonal_recurrence(_cell("RandomNormal", None))
    assert not wants_orthogonal_recurrence(LayerSite(_at("head ="), "Dense", "dense"))


def test_a_fit_given_no_targets_scales_x_and_the_validation_x_by_the_largest_magnitude():
    # The model's own step may read its inputs as targets (a VAE's pixels): scaled, not
    # standardised, they stay in [0, 1].
    edit = scale_fit_input(_at("validation_data"), SCRIPT)
    assert (
        "model.fit(features / abs(features).max(), prices, "
        "validation_data=(val_x / abs(features).max(), val_y), epochs=3)"
    ) in _patched(edit)
    assert scale_fit_input(_at("features / 255.0"), SCRIPT) is None


def test_a_better_initialisation_is_not_proposed_for_layers_already_drawn_so():
    from gradient_doctor.core.findings import Finding, Fix, Origin
    from gradient_doctor.core.fix_placement import FixSites, place_fixes

    origin = Origin("Square", "Square", None, _at("pair ="), None, (), ())
    better = Fix("better_init", "He", 'keras.layers.Dense(units, kernel_initializer="he_normal")')
    finding = Finding("forward_overflow", 2, "forward", origin, ".", fixes=(better,))
    he = LayerSite(_at("hidden ="), "Dense", "dense", "relu", "HeNormal")
    glorot_sigmoid = LayerSite(_at("head ="), "Dense", "dense_1", "sigmoid", "GlorotUniform")
    drawn_well = FixSites(trained_layers=(he, glorot_sigmoid))
    assert place_fixes(finding, sites=drawn_well).fixes == ()
    # A ReLU layer drawn far too wide is what the fix is for: it stays.
    wide = LayerSite(_at("hidden ="), "Dense", "dense", "relu", "RandomNormal")
    kept = place_fixes(finding, sites=FixSites(trained_layers=(wide, glorot_sigmoid))).fixes
    assert [fix.family for fix in kept] == ["better_init"]
