"""A log of probabilities picked from a softmax on another line (`probs = softmax(z)`,
`p = probs.gather(1, y)`, `log(p)`): the softmax becomes a log_softmax on its line and
the log is dropped on its own, the same values exact, in the forward pass (a log of 0)
and in the backward (the gradient 1 / p of a denormal p)."""

from dataclasses import replace

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge import diagnose

SOFTMAX = SourceLine("train.py", 11, "    probs = torch.softmax(logits, dim=1)")
LOG = "loss = -torch.log(picked).mean()"


def _picked(make_evidence, make_stats, softmax=SOFTMAX, **where):
    evidence = make_evidence(
        op="Log",
        code=LOG,
        inputs=(make_stats(min=0.0, max=1.0, zeros=3),),
        outputs=(make_stats(inf=3),),
        framework="torch",
        **where,
    )
    return replace(evidence, picked_softmax=OpCall("Softmax", softmax, (make_stats(),)))


def test_a_log_of_picked_probabilities_moves_onto_the_softmax(make_evidence, make_stats):
    first = diagnose(_picked(make_evidence, make_stats)).fixes[0]
    assert first.family == "library_function"
    assert first.rewrite == ("loss = -picked.mean()",)
    (softmax,) = first.edits
    assert (softmax.line, softmax.new_lines) == (11, ("probs = torch.log_softmax(logits, dim=1)",))
    assert softmax.old_lines == ("probs = torch.softmax(logits, dim=1)",)


def test_the_backward_singularity_of_the_same_log_moves_it_too(make_evidence, make_stats):
    evidence = _picked(make_evidence, make_stats, phase="backward", gradient_of="Log")
    origin = replace(
        evidence.origin,
        op="RealDiv",
        inputs=(make_stats(min=-0.002, max=-0.002), make_stats(min=1.4e-45, max=1.0)),
    )
    diagnosis = diagnose(replace(evidence, origin=origin))
    assert diagnosis.category == "backward_singularity"
    assert [fix.family for fix in diagnosis.fixes][:2] == ["library_function", "safe_log"]
    assert diagnosis.fixes[0].rewrite == ("loss = -picked.mean()",)


def test_a_softmax_on_the_logs_own_line_or_another_file_is_left_to_the_other_rewrites(
    make_evidence, make_stats
):
    same_line = SourceLine("train.py", 42, LOG)
    fixes = diagnose(_picked(make_evidence, make_stats, softmax=same_line)).fixes
    assert all(fix.edits == () for fix in fixes if fix.family == "library_function")
    elsewhere = replace(SOFTMAX, file="model.py")
    fixes = diagnose(_picked(make_evidence, make_stats, softmax=elsewhere)).fixes
    assert "library_function" not in [fix.family for fix in fixes]


def test_a_log_of_probabilities_read_elsewhere_too_becomes_log_softmax_where_it_is(
    make_evidence, make_stats, tmp_path, monkeypatch
):
    # A policy's entropy bonus, `-(probs * torch.log(probs))`, of probabilities that are
    # also sampled from and gathered: the log, not the softmax, is rewritten.
    script = tmp_path / "agent.py"
    lines = [
        "import torch",
        "def step(logits, best):",
        "    probs = torch.softmax(logits, dim=-1)",
        "    actions = torch.multinomial(probs, 1).squeeze(1)",
        "    entropy = -(probs * torch.log(probs)).sum(-1).mean()",
        "    return entropy",
    ]
    script.write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    softmax = OpCall("Softmax", SourceLine("agent.py", 3, lines[2]), (make_stats(),))
    evidence = make_evidence(
        op="Log",
        code=lines[4],
        inputs=(make_stats(min=0.0, max=1.0, zeros=3),),
        outputs=(make_stats(inf=3),),
        framework="torch",
    )
    origin = replace(evidence.origin, source=SourceLine("agent.py", 5, lines[4]))
    evidence = replace(evidence, origin=origin, logged_softmax=softmax)
    fixes = diagnose(evidence).fixes
    first = fixes[0]
    assert first.family == "library_function"
    assert first.rewrite == (
        "entropy = -(probs * torch.log_softmax(logits, dim=-1)).sum(-1).mean()",
    )
    # No loss here to hand logits to: the generic from_logits advice is left out.
    assert "from_logits" not in [fix.family for fix in fixes]
    assert first.edits == ()
    # `logits` assigned again between the two lines: the renamed call would read another
    # value, so the log is left to the other fixes.
    script.write_text("\n".join([*lines[:3], "    logits = logits / 2", *lines[3:]]) + "\n")
    import linecache

    linecache.clearcache()
    moved = replace(origin, source=SourceLine("agent.py", 6, lines[4]))
    fixes = diagnose(replace(evidence, origin=moved)).fixes
    assert "library_function" not in [fix.family for fix in fixes]
