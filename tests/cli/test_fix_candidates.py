"""What `gradient-doctor fix` reruns: the verified patches, then those no trial could try,
fixes' and expected not-fixes' alike (a lower rate `run` verifies by its copy)."""

from gradient_doctor.cli.fix_command import _candidates

LOWER = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-lr = 5\n+lr = 0.5\n"
GUARD = "--- a/train.py\n+++ b/train.py\n@@ -2 +2 @@\n-y = log(p)\n+y = log(p + 1e-7)\n"


def test_an_untried_expected_not_fix_with_a_patch_is_rerun_after_the_fixes():
    problem = {
        "fixes": [
            {"family": "safe_log", "title": "guard", "patch": GUARD, "verified": True},
        ],
        "not_fixes": [
            {
                "remedy": "lower_learning_rate",
                "why": "only slows the drift",
                "evidence": "not tried: an unchanged PyTorch script has no step function",
                "structural": False,
                "patch": LOWER,
            },
            {
                "remedy": "gradient_clipping",
                "why": "clipping acts on gradients",
                "evidence": None,
                "structural": True,  # a fact: nothing to rerun
                "patch": None,
            },
        ],
    }
    found = [(c.family, c.untried) for c in _candidates(problem)]
    assert found == [("safe_log", False), ("lower_learning_rate", True)]
    # Tried and refuted inside the run: not rerun.
    problem["not_fixes"][0]["evidence"] = "tried with learning rate 0.5: not finite again"
    assert [c.family for c in _candidates(problem)] == ["safe_log"]


def test_an_out_path_holding_the_users_own_file_is_refused_with_another_name(tmp_path):
    import pytest

    from gradient_doctor.cli.fix_command import check_out
    from gradient_doctor.errors import UsageError

    mine = tmp_path / "gradient-doctor.patch"
    mine.write_text("my own notes\n")
    with pytest.raises(UsageError) as refused:
        check_out(str(mine))
    message = str(refused.value)
    assert f"for example `--out {tmp_path / 'gradient-doctor.doctor.patch'}`" in message
    # A script named by mistake: the suggestion is a patch's name, not another script's.
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    with pytest.raises(UsageError) as refused:
        check_out(str(script))
    assert f"for example `--out {tmp_path / 'train.doctor.patch'}`" in str(refused.value)


def test_of_the_verified_patches_that_held_the_one_that_learned_clearly_best_is_written(capsys):
    # A regression whose mean predictor scores 129: the lower rate's copy ended at 145
    # (it learned nothing past the mean), clipping's at 35.
    from gradient_doctor.cli.fix_command import Candidate, _best
    from gradient_doctor.cli.patched_rerun import Rerun

    candidates = [
        Candidate("lower_learning_rate", "lower", LOWER),
        Candidate("gradient_clipping", "clip", GUARD),
        Candidate("batch_normalization", "bn", GUARD),
    ]
    held = {
        0: Rerun(True, 160, "held", first_loss=1100.0, final_loss=145.0),
        1: Rerun(True, 160, "held", first_loss=1100.0, final_loss=35.0),
        2: Rerun(True, 160, "held", first_loss=1100.0, final_loss=50.0),
    }
    assert _best(candidates, held) == 1
    said = capsys.readouterr().err
    assert "lower_learning_rate held too, but its copy's loss ended at 145 where" in said
    assert "gradient_clipping's, run as long, ended at 35: writing gradient_clipping's patch" in (
        said
    )
    # Within twice the best, the diagnosis's order stands.
    held[0] = Rerun(True, 160, "held", first_loss=1100.0, final_loss=60.0)
    assert _best(candidates, held) == 0
