"""Which layers' stuck units explain zero gradients, found in per-layer statistics."""

from gradient_doctor.core.records import LayerRecord
from gradient_doctor.core.stuck_units import DEAD, SATURATED, find_stuck_units

ZERO = ("net/dense/kernel", "net/dense/bias", "net/dense_1/kernel", "net/dense_1/bias")


def test_a_layer_whose_relus_all_died_explains_the_zero_gradients():
    layers = (
        LayerRecord("net/dense", dead_fraction=0.0),
        LayerRecord("net/dense_1", dead_fraction=1.0),
        LayerRecord("net/dense_2"),
    )
    ratios = {"net/dense": ((0, 10), (0.9, 1e-3)), "net/dense_1": ((0, 10), (0.95, 2e-3))}
    stuck = find_stuck_units(ZERO, layers, 4, ratios)
    assert stuck.kind == DEAD
    assert stuck.layers == ("net/dense_1",)
    assert stuck.variables == ZERO
    assert stuck.since == 4
    assert stuck.largest_update == ("net/dense_1", 0, 0.95)  # sampled at or before step 4


def test_most_units_dead_is_not_every_unit():
    layers = (LayerRecord("net/dense_1", dead_fraction=0.97),)
    assert find_stuck_units(ZERO, layers, 4) is None


def test_a_dead_layer_whose_variables_still_get_gradients_explains_nothing():
    # The zero gradients are elsewhere (a tf.sign on another branch): a broken path.
    layers = (LayerRecord("net/other", dead_fraction=1.0),)
    assert find_stuck_units(ZERO, layers, 4) is None


def test_a_fully_saturated_layer_explains_them_too():
    layers = (LayerRecord("net/dense", saturated_fraction=1.0),)
    stuck = find_stuck_units(ZERO, layers, 0)
    assert stuck.kind == SATURATED
    assert stuck.layers == ("net/dense",)
    assert stuck.largest_update is None  # nothing sampled


def test_updates_sampled_after_the_gradients_stopped_are_not_the_cause():
    layers = (LayerRecord("net/dense_1", dead_fraction=1.0),)
    ratios = {"net/dense_1": ((0, 10, 20), (0.02, 0.5, 0.9))}
    assert find_stuck_units(ZERO, layers, 10, ratios).largest_update == ("net/dense_1", 10, 0.5)


def test_units_stuck_in_the_same_layers_are_one_problem_though_more_variables_follow():
    # A fine-tune at a rate of 2 killed the ReLUs of two layers: the zero gradients of
    # their variables were reported at step 243, then again at step 293 when the next
    # layer's bias joined them. The same dead layers are one problem.
    from gradient_doctor.core.evidence import TrainingSetup
    from gradient_doctor.core.pipeline.adapter import Adapter, StepReading
    from gradient_doctor.core.pipeline.session import Session

    class DeadLayers(Adapter):
        zero: tuple[str, ...] = ()

        def localize(self, replay, step, history, setup):  # pragma: no cover - no failure
            raise AssertionError("no step failed")

        def training_setup(self) -> TrainingSetup:
            return TrainingSetup()

        def is_user_file(self, filename: str) -> bool:
            return True

        def zero_gradients(self, window: int) -> tuple[str, ...]:
            return self.zero

        def layer_records(self):
            return (LayerRecord("net/dense_1", dead_fraction=1.0), LayerRecord("net/dense_2"))

    adapter = DeadLayers()
    session = Session(adapter, zero_gradient_window=2)
    streak = StepReading(failed=False, loss=1.0, grad_norm=1.0, zero_streak=2)
    adapter.zero = ("net/dense_1/kernel", "net/dense_1/bias")
    session.after_step(streak, None)
    adapter.zero = ("net/dense_1/kernel", "net/dense_1/bias", "net/dense_2/bias")
    session.after_step(streak, None)
    assert [p.category for p in session.problems] == ["dead_units"]
