"""The terminal report: plain text building blocks and what a no-colour console shows."""

import dataclasses
import io

from rich.console import Console

from gradient_doctor.core.findings import Fix, NotFix, TensorStats
from gradient_doctor.core.report import Report
from gradient_doctor.render.terminal import patch_text, render_finding, render_report
from gradient_doctor.render.text import (
    format_finding_lines,
    header_line,
    source_line,
    tensor_lines,
    warning_lines,
)

EXP_LINE = "  -> train.py:42   w = tf.exp(scores)"


def rendered(report):
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())
    render_report(report, console)
    return console.export_text()


def test_forward_finding_lines(exp_problem):
    assert format_finding_lines(exp_problem) == [
        "forward_overflow at step 1830",
        "phase: forward",
        "op: Exp  name: message_passing/Exp  layer: message_passing",
        EXP_LINE,
        "input 0: float32 [32, 8]  min -3.1  max 712.4  nan 0  inf 0  zeros 0",
        "output 0: float32 [32, 8]  nan 0  inf 17",
        "The input to Exp reached 712.4; float32 exp overflows above 88.72.",
        "Will not help:",
        "  - gradient_clipping: the overflow happens in the forward pass, before any gradient",
        "Try:",
        "  1. Subtract the row maximum before exp [stable_softmax]",
        "     verified: replayed 200 steps from step 1829: all finite",
        "     w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))",
        "     patch (apply with `patch -p1` in the folder you ran from):",
        "     --- a/train.py",
        "     +++ b/train.py",
        "     @@ -42 +42 @@",
        "     -    w = tf.exp(scores)",
        "     +    w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))",
    ]


def test_a_patch_is_drawn_as_a_coloured_diff(exp_problem):
    text = patch_text(exp_problem.fixes[0])
    styles = {text.plain[span.start : span.end]: str(span.style) for span in text.spans}
    assert styles["\n-    w = tf.exp(scores)"] == "red"
    assert styles["\n+    w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))"] == (
        "green"
    )
    assert styles["\n--- a/train.py"] == "bold"


def test_backward_finding_names_the_gradient_and_the_forward_line(sqrt_problem):
    lines = format_finding_lines(sqrt_problem)

    assert "phase: backward" in lines
    assert (
        "op: SqrtGrad (gradient of Sqrt)  name: gradient_tape/critic/norm/SqrtGrad  layer: critic"
        in lines
    )
    assert "  -> critic.py:12   norm = tf.norm(grads, axis=1)" in lines
    assert "input 0: float32 [?]  min 0  max 4.5  nan 0  inf 0  zeros 3" in lines
    assert "input 1: float32 [?]  min -1  max 1  nan 0  inf 0  zeros 0" in lines
    assert "output 0: float32 [?]  nan 0  inf 3" in lines
    assert "  1. Take the norm with an epsilon inside the square root [safe_norm]" in lines
    assert lines[-1] == "     norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1) + 1e-12)"


def test_unverified_fix_says_so(make_finding):
    fix = Fix(
        "safe_sqrt", "Clamp before sqrt", "y = tf.sqrt(tf.maximum(x, 1e-12))", False, "NaN at 3"
    )
    lines = format_finding_lines(make_finding("sqrt", fixes=(fix,)))

    assert "     not verified: NaN at 3" in lines


def test_disconnected_finding_lines(disconnected_problem):
    lines = format_finding_lines(disconnected_problem)

    assert lines[:4] == [
        "disconnected_gradients at step 0",
        "no gradient reaches all 2 trained variables: "
        "generator/dense/kernel and generator/dense/bias",
        "path from the loss breaks at ArgMax",
        "  -> gan.py:88   tokens = tf.argmax(p, -1)",
    ]
    assert "Will not help:" not in lines


def test_tensor_lines_show_only_the_first_few():
    stats = TensorStats("float32", (), 1.0, 2.0, nan=0, inf=0, zeros=0)

    lines = tensor_lines("input", [stats] * 6, with_range=True)

    assert lines[0] == "input 0: float32 []  min 1  max 2  nan 0  inf 0  zeros 0"
    assert lines[-1] == "... and 2 inputs more"
    assert len(lines) == 5


def test_tensor_without_finite_values():
    stats = TensorStats("float16", (3,), None, None, nan=3, inf=0, zeros=0)

    assert tensor_lines("input", [stats], with_range=True) == [
        "input 0: float16 [3]  no finite values  nan 3  inf 0  zeros 0"
    ]


def test_source_line_strips_the_code_indent(sqrt_problem):
    assert source_line(sqrt_problem.origin.source) == (
        "  -> critic.py:12   norm = tf.norm(grads, axis=1)"
    )


def test_header_lines(problem_report, healthy_report):
    assert (
        header_line(problem_report)
        == "problem: train.py, 1831 steps watched, 2 problems, 1 warning"
    )
    assert header_line(healthy_report) == "healthy: 500 steps watched, no non-finite values"
    unwatched = dataclasses.replace(healthy_report, steps_watched=0)
    assert header_line(unwatched).startswith("healthy: 0 steps watched: no training step")
    assert "nothing was checked" in header_line(unwatched)
    assert header_line(Report(script=None, steps_watched=1, script_error="boom")) == (
        "problem: 1 step watched, the script raised an error, no numerical problem found before it"
    )


def test_warning_lines(warning):
    assert warning_lines(warning) == [
        "  forward_overflow at step 12, Exp in layer `message_passing`",
        "    value 61.3 of limit 88.72, limit expected at step 140",
        "  " + EXP_LINE,
        "    The input to Exp grows by about 2 per step.",
    ]


def test_report_shows_the_diagnosis(problem_report):
    text = rendered(problem_report)

    assert "gradient-doctor problem: train.py, 1831 steps watched" in text
    assert "problem 1: forward_overflow at step 1830" in text
    assert EXP_LINE in text
    assert "op: Exp  name: message_passing/Exp  layer: message_passing" in text
    assert "op: SqrtGrad (gradient of Sqrt)" in text
    assert "inf 17" in text
    assert "The input to Exp reached 712.4; float32 exp overflows above 88.72." in text
    assert "Will not help:" in text
    assert "gradient_clipping: the overflow happens in the forward pass" in text
    assert "Try:" in text
    assert "w = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))" in text
    assert "verified: replayed 200 steps from step 1829: all finite" in text


def test_warnings_come_after_problems(problem_report):
    text = rendered(problem_report)

    assert text.index("Warnings:") > text.index("problem 2: backward_singularity at step 7")
    assert "value 61.3 of limit 88.72, limit expected at step 140" in text


def test_healthy_report_is_one_line(healthy_report):
    text = rendered(healthy_report)

    assert text.strip().splitlines() == [
        "gradient-doctor healthy: 500 steps watched, no non-finite values"
    ]


def test_healthy_line_is_green(healthy_report):
    console = Console(record=True, width=100, force_terminal=True, file=io.StringIO())

    render_report(healthy_report, console)

    assert "\x1b[1;32m" in console.export_text(styles=True)


def test_script_error_is_shown():
    text = rendered(Report(script="train.py", steps_watched=4, script_error="KeyError: 'label'"))

    assert "the script raised KeyError: 'label' (traceback above)" in text
    # A crash is no numerical problem: the header does not count "0 problems".
    assert " ".join(text.split()).startswith(
        "gradient-doctor problem: train.py, 4 steps watched, the script raised an error, "
        "no numerical problem found before it"
    )


def test_square_brackets_are_not_read_as_markup(make_finding):
    fix = Fix("safe_where", "Mask [inside] the op", "y = x[mask]\n[bold]z[/bold] = 1")
    finding = make_finding("exp", explanation="values in x[0] reached [red]inf", fixes=(fix,))

    text = rendered(Report(script="train.py", steps_watched=1, problems=(finding,)))

    assert "values in x[0] reached [red]inf" in text
    assert "Mask [inside] the op" in text
    assert "[bold]z[/bold] = 1" in text


def test_default_console_writes_to_stderr(healthy_report, capsys):
    render_report(healthy_report)

    captured = capsys.readouterr()
    assert captured.out == ""
    assert "healthy: 500 steps watched" in captured.err


def test_render_finding_prints_one_panel(exp_problem):
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())

    render_finding(dataclasses.replace(exp_problem, step=None), console)

    text = console.export_text()
    assert "gradient-doctor: forward_overflow" in text
    assert EXP_LINE in text


def test_a_skipped_update_is_said(exp_problem):
    import dataclasses

    lines = format_finding_lines(dataclasses.replace(exp_problem, skipped_updates=1))
    assert (
        "The doctor stopped this step before it reached the weights: its update was skipped."
        in (lines)
    )
    assert not any("skipped" in line for line in format_finding_lines(exp_problem))
    # A script that updates its tensors itself: the "skip" is its gradients zeroed.
    own = dataclasses.replace(exp_problem, skipped_updates=1, own_update=True)
    assert (
        "The doctor stopped this step before it reached the weights: you update them "
        "yourself, so it set the step's gradients to zero before your update read them "
        "(it moved nothing)."
    ) in format_finding_lines(own)
    # Weights already NaN when the step began: the skip kept nothing good.
    broken = dataclasses.replace(exp_problem, skipped_updates=1, broken_before=True)
    lines = format_finding_lines(broken)
    assert not any("before it reached the weights" in line for line in lines)
    assert (
        "The doctor stopped the failing step (its update was skipped), but the weights were "
        "already NaN or Inf when it began: the last good weights are not kept."
    ) in lines


def test_the_summary_after_shown_problems_gives_each_fixs_final_verdict(exp_problem):
    confirmed = dataclasses.replace(exp_problem.fixes[0], verified=True)
    failed = dataclasses.replace(
        exp_problem.fixes[0], family="clip_input_domain", verified=False, patch=""
    )
    untried = dataclasses.replace(exp_problem.fixes[0], family="normalize_input", verified=None)
    finding = dataclasses.replace(exp_problem, fixes=(confirmed, failed, untried))
    report = Report(script="train.py", steps_watched=1831, problems=(finding,))
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())
    render_report(report, console, problems_shown=True)
    lines = console.export_text().splitlines()
    assert lines[1] == "problem 1: forward_overflow at step 1830 (details above)"
    assert lines[2] == "  verified: stable_softmax [patch]; not verified: clip_input_domain"
    none_verified = dataclasses.replace(finding, fixes=(failed, untried))
    report = dataclasses.replace(report, problems=(none_verified,))
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())
    render_report(report, console, problems_shown=True)
    assert "  no fix verified; not verified: clip_input_domain" in console.export_text()


def test_a_problem_whose_verdicts_the_reruns_changed_is_printed_again_in_full(exp_problem):
    # The panel printed during the run listed a remedy under "Will not help"; the
    # confirmation reruns then verified it: the summary must not leave that panel alone.
    promoted = dataclasses.replace(exp_problem.fixes[0], family="lower_learning_rate")
    after = dataclasses.replace(
        exp_problem, fixes=(*exp_problem.fixes, dataclasses.replace(promoted, verified=True))
    )
    report = Report(script="train.py", steps_watched=1831, problems=(after,))
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())
    render_report(report, console, problems_shown=True, shown=(exp_problem,))
    text = console.export_text()
    assert "problem 1: forward_overflow at step 1830, as the reruns left it" in text
    assert "lower_learning_rate" in text and "(details above)" not in text
    # Evidence that only grew ("; confirmed: ...") leaves the verdicts as printed.
    grown = dataclasses.replace(
        exp_problem,
        fixes=tuple(
            dataclasses.replace(fix, evidence=f"{fix.evidence}; confirmed")
            for fix in exp_problem.fixes
        ),
    )
    report = dataclasses.replace(report, problems=(grown,))
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())
    render_report(report, console, problems_shown=True, shown=(exp_problem,))
    assert "(details above)" in console.export_text()


def test_a_problem_whose_untried_remedies_the_reruns_tried_is_printed_again(exp_problem):
    # Printed during the run: "not tried"; the reruns then tried the remedy and it did not
    # hold: the verdict is the same, but the panel on the screen no longer says so.
    untried = dataclasses.replace(exp_problem.fixes[0], verified=None, evidence="not tried")
    tried = dataclasses.replace(untried, verified=None, evidence="applied, it failed at step 14")
    before = dataclasses.replace(exp_problem, fixes=(untried,))
    after = dataclasses.replace(exp_problem, fixes=(tried,))
    report = Report(script="train.py", steps_watched=1831, problems=(after,))
    console = Console(record=True, width=100, no_color=True, file=io.StringIO())
    render_report(report, console, problems_shown=True, shown=(before,))
    text = console.export_text()
    assert "as the reruns left it" in text and "it failed at step 14" in text


def test_a_reason_no_trial_ran_shared_by_several_remedies_is_said_once(exp_problem):
    # An unchanged PyTorch script's: four lines repeated under every remedy, before.
    why = (
        "an unchanged PyTorch script has no step function the doctor can call again from "
        "the last good state"
    )
    fixes = tuple(
        dataclasses.replace(fix, verified=None, evidence=f"not tried: {why}")
        for fix in exp_problem.fixes
    )
    confirmed = dataclasses.replace(
        fixes[0], verified=True, evidence=f"confirmed: it held (not tried inside the run: {why})"
    )
    not_fixes = tuple(
        dataclasses.replace(item, evidence=f"not tried: {why}") for item in exp_problem.not_fixes
    )
    assert not_fixes  # the reason is shared by a fix and a remedy that will not help
    problem = dataclasses.replace(exp_problem, fixes=(confirmed, *fixes[1:]), not_fixes=not_fixes)
    lines = format_finding_lines(problem)
    text = "\n".join(lines)
    assert text.count(why) == 1
    assert f"Not tried inside the run: {why}." in lines
    assert "verified: confirmed: it held (not tried inside the run)" in [
        line.strip() for line in lines
    ]


def test_a_bound_just_past_a_whole_number_shows_the_digits_that_matter():
    # acos of a cosine similarity rounded to 1.00000024: "max 1" hid the bug.
    import numpy as np

    from gradient_doctor.render.text import min_max

    past_one = float(np.float32(1.0000002))
    assert min_max(TensorStats("float32", (4,), -1.0, past_one, 0, 0, 0)) == (
        "min -1  max 1.00000024"
    )
    assert min_max(TensorStats("float32", (4,), -3.1, 712.4, 0, 0, 0)) == "min -3.1  max 712.4"


def test_a_finding_printed_during_the_run_says_reruns_may_still_overturn_it(exp_problem):
    # The live box said "verified" for fixes the final box, after the reruns, called
    # "not verified", with nothing to say the first verdict was provisional.
    from gradient_doctor.cli.fix_confirmation import confirmation_pending

    pending = confirmation_pending("always", trial_steps=200)
    buffer = io.StringIO()
    render_finding(exp_problem, Console(file=buffer, width=200), pending=pending)
    text = buffer.getvalue()
    assert "(verdicts from inside the run: after the script, each patch is applied" in text
    assert text.index("Try:") < text.index("verdicts from inside the run")
    assert confirmation_pending("never", trial_steps=200) is None
    assert confirmation_pending("auto", trial_steps=0) is None
    assert "(when the run took at most 120 s)" in confirmation_pending("auto", trial_steps=200)


def test_a_graph_error_is_summed_up_by_what_it_says_not_where():
    # TensorFlow's message: a first line saying nothing, the failing node's stack (the
    # traceback above shows it all), then what went wrong, then the node again.
    error = (
        "InvalidArgumentError: Graph execution error:\n\nDetected at node loss/Sparse "
        'defined at (most recent call last):\n  File "train.py", line 14, in <module>\n\n'
        "Received a label value of 10 which is outside the valid range of [0, 10).  Label "
        "values: 6 10 7\n\t [[{{node loss/Sparse}}]] [Op:__inference_step_2018]"
    )
    text = rendered(Report(script="train.py", steps_watched=0, script_error=error))
    assert (
        "the script raised InvalidArgumentError: Received a label value of 10 which is "
        "outside the valid range of [0, 10)."
    ) in " ".join(text.split())
    assert "Detected at node" not in text and "File " not in text


def test_an_error_that_lists_its_values_is_summed_up_by_the_line_before_them():
    # torch.distributions: what went wrong ends in ":", and the offending tensor follows.
    error = (
        "ValueError: Expected parameter scale (Tensor of shape (64, 1)) of distribution "
        "Normal(loc: torch.Size([64, 1]), scale: torch.Size([64, 1])) to satisfy the "
        "constraint GreaterThan(lower_bound=0.0), but found invalid values:\n"
        "tensor([[ 0.0632],\n        [-0.0239]], grad_fn=<AddmmBackward0>)"
    )
    text = " ".join(
        rendered(Report(script="train.py", steps_watched=0, script_error=error)).split()
    )
    assert "the script raised ValueError: Expected parameter scale" in text
    assert "to satisfy the constraint GreaterThan(lower_bound=0.0)" in text


def test_many_variables_without_a_gradient_are_counted_by_their_layers_in_either_framework():
    from gradient_doctor.core.findings import Disconnected
    from gradient_doctor.render.text import disconnected_lines

    torch_names = tuple(f"blocks.{i}.{leaf}" for i in range(6) for leaf in ("weight", "bias"))
    keras_names = tuple(f"model/dense_{i}/{leaf}" for i in range(6) for leaf in ("kernel", "bias"))
    for names in (torch_names, keras_names):
        (line,) = disconnected_lines(Disconnected(names, False, None))
        assert line.startswith("no gradient reaches 12 trained variables in 6 layers"), line


def test_a_scripts_own_exit_is_said_as_an_exit_not_a_traceback():
    text = rendered(Report(script="train.py", steps_watched=4, script_error="SystemExit: 3"))
    assert "the script exited (SystemExit: 3)" in text
    assert "traceback above" not in text


def test_a_not_fix_whose_trial_could_not_tell_is_said_as_an_expectation(make_finding):
    # The unchanged step held as well, so the lower rate's trial is no evidence either way.
    evidence = (
        "stayed finite for 5 steps (unchanged, it also stayed finite for 5 steps, "
        "so this trial cannot tell)"
    )
    could_not_tell = NotFix("lower_lr", "it is expected to delay it", evidence, structural=False)
    borne_out = NotFix("larger_batch", "it is expected to delay it", "failed at step 2", False)
    fact = NotFix("gradient_clipping", "clipping acts on gradients", "failed at step 1")
    lines = format_finding_lines(make_finding("sqrt", not_fixes=(could_not_tell, borne_out, fact)))

    assert "  - lower_lr: it is expected to delay it (expected; its trial could not tell)" in lines
    assert "  - larger_batch: it is expected to delay it" in lines
    assert "  - gradient_clipping: clipping acts on gradients" in lines
