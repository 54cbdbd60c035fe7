"""The bounded, evenly thinned history of a long series."""

import pytest

from gradient_doctor.core.thinned_history import ThinnedHistory


def test_keeps_everything_until_full():
    history = ThinnedHistory(8)
    for item in range(8):
        history.append(item)
    assert history.items() == tuple(range(8))
    assert history.stride == 1


def test_halves_and_doubles_the_stride_when_full():
    history = ThinnedHistory(4)
    for item in range(10):
        history.append(item)
    assert history.items() == (0, 4, 8)
    assert history.stride == 4
    assert list(history) == [0, 4, 8] and len(history) == 3


def test_size_is_checked():
    with pytest.raises(ValueError, match="`size` must be an int of at least 2. Received: size=1"):
        ThinnedHistory(1)
