"""A probability loss fed a layer's raw output: the diagnosis says what the loss does with
such values and why a lower rate or clipping cannot help, and its fixes are patches of
the user's lines: the layer given the activation the loss expects (added where the call
passes none, on the one layer of several the creation line's columns name), the loss
told from_logits=True (a class's call, a function's call, a name in `compile`, first
or second argument), spelled as the file imports keras."""

import dataclasses

import pytest

from gradient_doctor.core.evidence import Evidence, LossInput
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.knowledge import diagnose

MODEL = 'model = keras.Sequential([layers.Dense(32, activation="relu"), layers.Dense(4)])'
COMPILE = 'model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])'
SCRIPT = f"import keras\nfrom keras import layers\n\n{MODEL}\n{COMPILE}\n"


def _site(code: str, line: int, call: str | None = None) -> SourceLine:
    if call is None:
        return SourceLine("train.py", line, code)
    start = code.rindex(call)
    return SourceLine("train.py", line, code, column=start, end_column=code.index(")", start) + 1)


def _fed(**changes) -> LossInput:
    fed = LossInput(
        loss="categorical_crossentropy",
        expects="probabilities",
        activation="softmax",
        producer="BiasAdd",
        layer="dense_1",
        layer_class="Dense",
        layer_site=_site(MODEL, 4, "layers.Dense(4)"),
        loss_site=_site(COMPILE, 5),
        loss_argument=("name", "categorical_crossentropy"),
    )
    return dataclasses.replace(fed, **changes)


def _placed(tmp_path, fed: LossInput, script: str = SCRIPT):
    (tmp_path / "train.py").write_text(script)
    finding = diagnose(Evidence(step=0, phase=None, origin=None, loss_input=fed)).finding(
        Evidence(step=0, phase=None, origin=None, loss_input=fed)
    )
    return place_fixes(finding, root=str(tmp_path))


def _added(patch: str) -> list[str]:
    return [line[1:] for line in patch.splitlines() if line.startswith("+") and line[1:2] != "+"]


def test_the_layer_gets_the_activation_and_the_named_loss_is_told_from_logits(tmp_path):
    finding = _placed(tmp_path, _fed())
    assert finding.category == "logits_as_probabilities"
    assert (finding.step, finding.phase, finding.origin) == (0, None, None)
    assert "raw output of layer `dense_1`" in finding.explanation
    assert "divides them by their sum and clips" in finding.explanation
    assert [fix.family for fix in finding.fixes] == ["activation_change", "from_logits"]
    layer, logits = finding.fixes
    # Only the second Dense of the line, the one the creation line's columns name.
    assert _added(layer.patch) == [
        'model = keras.Sequential([layers.Dense(32, activation="relu"), '
        'layers.Dense(4, activation="softmax")])'
    ]
    assert _added(logits.patch) == [
        'model.compile("adam", keras.losses.CategoricalCrossentropy(from_logits=True), '
        'metrics=["accuracy"])'
    ]
    assert {item.remedy for item in finding.not_fixes} == {
        "lower_learning_rate",
        "gradient_clipping",
    }
    assert all("not what the loss reads" in item.why for item in finding.not_fixes)
    assert all(fix.verified is None for fix in finding.fixes)  # no trial inside the run


def test_a_loss_named_by_keyword_in_a_tf_keras_file_is_spelled_tf_keras(tmp_path):
    compile_line = 'model.compile(optimizer="sgd", loss="binary_crossentropy")'
    script = f"import tensorflow as tf\nlayers = tf.keras.layers\n\n{MODEL}\n{compile_line}\n"
    fed = _fed(
        loss="binary_crossentropy",
        activation="sigmoid",
        loss_site=_site(compile_line, 5),
        loss_argument=("name", "binary_crossentropy"),
    )
    layer, logits = _placed(tmp_path, fed, script).fixes
    assert 'layers.Dense(4, activation="sigmoid")' in _added(layer.patch)[0]
    assert _added(logits.patch) == [
        'model.compile(optimizer="sgd", loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))'
    ]
    assert "threshold=0.0" in logits.title  # a binary accuracy of logits needs it


@pytest.mark.parametrize(
    "code, call, expected",
    [
        (
            "loss_fn = keras.losses.SparseCategoricalCrossentropy()",
            "SparseCategoricalCrossentropy",
            "loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)",
        ),
        (
            "loss = ops.mean(keras.losses.categorical_crossentropy(y, p, from_logits=False))",
            "categorical_crossentropy",
            "loss = ops.mean(keras.losses.categorical_crossentropy(y, p, from_logits=True))",
        ),
    ],
    ids=["loss_class", "loss_function"],
)
def test_the_call_that_builds_or_computes_the_loss_is_told_from_logits(
    tmp_path, code, call, expected
):
    script = f"import keras\nfrom keras import layers, ops\n\n{MODEL}\n{code}\n"
    fed = _fed(layer=None, layer_class=None, layer_site=None, producer=None, values=(-3.25, 4.5))
    fed = dataclasses.replace(fed, loss_site=_site(code, 5), loss_argument=("call", call))
    finding = _placed(tmp_path, fed, script)
    assert "values no softmax made: any real number, here from -3.25 to 4.5" in (
        finding.explanation
    )
    (logits,) = finding.fixes  # no layer known: no activation to give it
    assert _added(logits.patch) == [expected]


def test_a_layer_with_an_activation_of_its_own_gets_no_patch(tmp_path):
    model = "model = keras.Sequential([layers.Dense(4, activation=act)])"
    script = f"import keras\nfrom keras import layers\n\n{model}\n{COMPILE}\n"
    fed = _fed(layer_site=_site(model, 4, "layers.Dense(4"))
    layer, logits = _placed(tmp_path, fed, script).fixes
    assert layer.patch is None  # `act` may be anything: the line is not rewritten
    assert 'Dense(..., activation="softmax")' in layer.code
    assert logits.patch is not None


@pytest.mark.parametrize(
    "code, expected",
    [
        ("return F.softmax(self.fc(x), dim=1)", "return self.fc(x)"),
        ("probs = scores.softmax(-1)", "probs = scores"),
        (
            "loss = F.cross_entropy(torch.softmax(a + b, dim=1), y)",
            "loss = F.cross_entropy((a + b), y)",
        ),
    ],
    ids=["function", "method", "inline_in_the_loss"],
)
def test_a_softmax_handed_to_cross_entropy_is_removed_where_it_is_made(tmp_path, code, expected):
    script = (
        f"import torch\nimport torch.nn.functional as F\n\n\ndef forward(self, x):\n    {code}\n"
    )
    site = SourceLine("train.py", 6, code)
    fed = LossInput(
        loss="cross_entropy",
        expects="logits",
        activation="softmax",
        loss_site=site,
        loss_argument=("call", "cross_entropy"),
        made_at=site,
    )
    finding = _placed(tmp_path, fed, script)
    assert finding.category == "probabilities_as_logits"
    assert "handed the output of a softmax at train.py:6" in finding.explanation
    assert "below log(C)" in finding.explanation
    (fix,) = finding.fixes
    assert fix.family == "from_logits"
    assert _added(fix.patch) == [f"    {expected}"]


@pytest.mark.parametrize(
    "code, call, expected",
    [
        ("loss = F.nll_loss(model(x), y)", "nll_loss", "loss = F.cross_entropy(model(x), y)"),
        (
            "criterion = nn.NLLLoss(reduction='sum')",
            "NLLLoss",
            "criterion = nn.CrossEntropyLoss(reduction='sum')",
        ),
    ],
    ids=["function", "module"],
)
def test_raw_scores_handed_to_nll_loss_make_it_cross_entropy(tmp_path, code, call, expected):
    script = f"import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n{code}\n"
    fed = LossInput(
        loss="nll_loss",
        expects="log-probabilities",
        activation="log_softmax",
        loss_site=SourceLine("train.py", 5, code),
        loss_argument=("call", call),
        values=(-0.5, 2.25),
    )
    finding = _placed(tmp_path, fed, script)
    assert finding.category == "logits_as_probabilities"
    assert "handed raw scores, here from -0.5 to 2.25" in finding.explanation
    (fix,) = finding.fixes
    assert _added(fix.patch) == [expected]


@pytest.mark.parametrize(
    "lines, line, removed, kept",
    [
        (
            ["model = nn.Sequential(nn.Linear(12, 6), nn.Softmax(dim=1))"],
            5,
            "-model = nn.Sequential(nn.Linear(12, 6), nn.Softmax(dim=1))",
            "+model = nn.Sequential(nn.Linear(12, 6))",
        ),
        (
            ["model = nn.Sequential(", "    nn.Linear(12, 6),", "    nn.Softmax(dim=1),", ")"],
            7,
            "-    nn.Softmax(dim=1),",
            None,
        ),
    ],
    ids=["in_the_arguments", "a_line_of_its_own"],
)
def test_a_softmax_module_a_model_is_built_with_is_taken_out(tmp_path, lines, line, removed, kept):
    script = "import torch\nfrom torch import nn\n\n\n" + "\n".join(lines) + "\n"
    site = SourceLine("train.py", line, script.splitlines()[line - 1].strip())
    fed = LossInput(
        loss="cross_entropy",
        expects="logits",
        activation="softmax",
        producer="softmax",
        made_at=site,
    )
    (fix,) = _placed(tmp_path, fed, script).fixes
    assert removed in fix.patch.splitlines()
    if kept is not None:
        assert kept in fix.patch.splitlines()


def test_a_sigmoid_handed_to_cross_entropy_is_named_as_the_sigmoid(tmp_path):
    code = "return torch.sigmoid(self.head(h))"
    script = f"import torch\n\n\ndef forward(self, h):\n    {code}\n"
    site = SourceLine("train.py", 5, code)
    fed = LossInput(
        loss="cross_entropy",
        expects="logits",
        activation="softmax",
        producer="sigmoid",
        made_at=site,
    )
    finding = _placed(tmp_path, fed, script)
    assert "applies its own softmax" in finding.explanation
    assert "handed the output of a sigmoid at train.py:5" in finding.explanation
    assert _added(finding.fixes[0].patch) == ["    return self.head(h)"]


def test_a_sigmoid_layer_handed_to_tf_nn_sigmoid_cross_entropy_gets_no_activation(tmp_path):
    model = 'model = keras.Sequential([layers.Dense(8), layers.Dense(1, activation="sigmoid")])'
    loss = "loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=model(x))"
    script = f"import keras\nimport tensorflow as tf\nfrom keras import layers\n\n{model}\n{loss}\n"
    layer_site = _site(model, 5, "layers.Dense(1")
    fed = LossInput(
        loss="sigmoid_cross_entropy_with_logits",
        expects="logits",
        activation="sigmoid",
        producer="sigmoid",
        layer="dense_1",
        layer_class="Dense",
        layer_site=layer_site,
        loss_site=_site(loss, 6),
        loss_argument=("call", "sigmoid_cross_entropy_with_logits"),
        made_at=layer_site,
    )
    finding = _placed(tmp_path, fed, script)
    assert finding.category == "probabilities_as_logits"
    assert "applies its own sigmoid" in finding.explanation
    assert "the output of a sigmoid at train.py:5" in finding.explanation
    (fix,) = finding.fixes
    assert fix.family == "activation_change"
    assert "build layer `dense_1` with no activation" in fix.title
    assert "torch" not in fix.title + fix.code
    assert _added(fix.patch) == [
        "model = keras.Sequential([layers.Dense(8), layers.Dense(1, activation=None)])"
    ]
