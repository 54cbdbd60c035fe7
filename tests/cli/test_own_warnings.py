"""The doctor's own warnings on the command line: their message alone, not its code."""

import warnings

from gradient_doctor.cli.own_warnings import plain_own_warnings


def test_the_doctors_warnings_are_shown_as_their_message_and_others_as_before(capsys, monkeypatch):
    handed_on = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *rest: handed_on.append(message))
    before = warnings.showwarning
    with warnings.catch_warnings(), plain_own_warnings():
        warnings.simplefilter("always")
        warnings.warn("gradient-doctor: step 17 failed too, under --keep-going", stacklevel=1)
        warnings.warn("a warning of the user's own", stacklevel=1)
    said = capsys.readouterr().err.splitlines()
    assert said == ["gradient-doctor: step 17 failed too, under --keep-going"]
    assert [str(message) for message in handed_on] == ["a warning of the user's own"]
    assert warnings.showwarning is before
