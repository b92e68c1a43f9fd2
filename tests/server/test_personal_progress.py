"""The progress lines of a Ditto run show the personal models' accuracy too."""

import pytest

from fairfl.server.results import personal_progress


@pytest.mark.parametrize("personal", [None, {}, {"num-clients": 0, "acc-mean": 0.5}])
def test_no_personal_models_add_nothing(personal):
    assert personal_progress(personal) == ""


def test_the_personal_part_in_percent():
    personal = {"num-clients": 3.0, "acc-mean": 0.5, "acc-worst-10": 0.125}
    assert personal_progress(personal) == " | personal models: mean 50.00 | worst-10% 12.50"
