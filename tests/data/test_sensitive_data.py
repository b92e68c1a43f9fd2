"""Data sets with a sensitive attribute: the Adult file format and the planted-bias generator."""

import numpy as np
import pytest

from fairfl.data import dataset_info, load_client_data
from fairfl.data.sensitive import (
    ADULT_NUM_FEATURES,
    load_adult,
    read_adult_rows,
    synthetic_pool,
)

# ruff: noqa: E501 (the rows as the files hold them)
# Rows as the UCI files hold them: ", " separators, '?' for missing values; adult.test
# starts with "|1x3 Cross validator" and ends its labels with '.'.
DATA = """\
39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, >50K
54, ?, 180211, Some-college, 10, Married-civ-spouse, ?, Husband, Asian-Pac-Islander, Male, 0, 0, 60, South, >50K
37, Private, 284582, Masters, 14, Married-civ-spouse, Exec-managerial, Wife, White, Female, 0, 0, 40, United-States, <=50K

"""
TEST = """\
|1x3 Cross validator
25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.
52, Self-emp-inc, 287927, HS-grad, 9, Married-civ-spouse, Exec-managerial, Wife, White, Female, 15024, 0, 40, United-States, >50K.
"""


def write_adult(directory):
    directory.mkdir()
    (directory / "adult.data").write_text(DATA)
    (directory / "adult.test").write_text(TEST)


def test_adult_files_are_read_and_encoded(tmp_path):
    write_adult(tmp_path / "adult")
    x, y, a = load_adult(tmp_path / "adult")
    # 3 rows of adult.data (the '?' row dropped) + 2 of adult.test; 6 numeric + 99 one-hot.
    assert x.shape == (5, ADULT_NUM_FEATURES) == (5, 105)
    assert y.tolist() == [0, 1, 0, 0, 1]
    assert a.tolist() == [1, 1, 0, 1, 0]  # sex: Male 1
    # age standardised: ages 39, 50, 37, 25, 52, mean 40.6, population std sqrt(95.44).
    assert x[0, 0] == pytest.approx(-1.6 / np.sqrt(95.44), rel=1e-6)
    # One-hot: sex is columns 62 (Female), 63 (Male): 6 + 8+16+7+14+6+5 categories before.
    assert x[:, 62].tolist() == [0, 0, 1, 0, 1] and x[:, 63].tolist() == [1, 1, 0, 1, 0]
    assert np.all(x[:, 6:].sum(axis=1) == 8)  # one category per categorical column
    _, _, race = load_adult(tmp_path / "adult", sensitive="race")
    assert race.tolist() == [1, 1, 1, 0, 1]  # White 1, Black 0


def test_adult_client_data_carries_the_attribute(tmp_path):
    write_adult(tmp_path / "adult")
    data = load_client_data(
        dataset="adult",
        partitioner="iid",
        partition_id=0,
        num_partitions=1,
        test_fraction=0.4,
        data_root=str(tmp_path),
    )
    assert dataset_info("adult").input_shape == (105,)
    assert data.has_attribute
    for x, a in ((data.x_train, data.a_train), (data.x_test, data.a_test)):
        assert x[:, 63].astype(int).tolist() == a.tolist()  # the Male column is A


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("39, State-gov, 77516\n", "expected 15 comma-separated fields, got 3"),
        (DATA.splitlines()[0].replace("<=50K", "maybe") + "\n", "income must be"),
        (DATA.splitlines()[0].replace("State-gov", "Space-gov") + "\n", "workclass 'Space-gov'"),
        (DATA.splitlines()[0].replace("77516", "many") + "\n", "fnlwgt must be a number"),
    ],
)
def test_bad_adult_rows_are_named(text, reason):
    with pytest.raises(ValueError, match=reason) as error:
        read_adult_rows(text.splitlines(), "adult.data")
    assert "adult.data line 1" in str(error.value)


def test_missing_adult_files_say_where(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"adult\.data"):
        load_adult(tmp_path)


def test_synthetic_bias_is_planted():
    # bias 0: y depends on A only through the proxies; the planted bias widens the
    # positive-rate gap P(y=1 | A=1) - P(y=1 | A=0).
    def gap(bias):
        _, y, a = synthetic_pool(0, num_samples=40_000, bias=bias)
        return y[a == 1].mean() - y[a == 0].mean()

    assert 0.05 < gap(0.0) < gap(1.5) < gap(3.0)
    x, y, a = synthetic_pool(0)
    assert x.shape == (12_000, 12) and np.array_equal(x[:, -1], a)
    assert 0.15 < y.mean() < 0.4  # about Adult's quarter of positives
    with pytest.raises(ValueError, match="privileged_share"):
        synthetic_pool(0, privileged_share=1.0)


def test_dirichlet_skews_the_attribute_mix():
    kwargs = {"dataset": "adult-synthetic", "partitioner": "dirichlet", "num_partitions": 5}
    heterogeneous = [
        load_client_data(partition_id=k, dirichlet_alpha=0.1, **kwargs).a_train.mean()
        for k in range(5)
    ]
    near_iid = [
        load_client_data(partition_id=k, dirichlet_alpha=5000.0, **kwargs).a_train.mean()
        for k in range(5)
    ]
    assert np.std(heterogeneous) > 0.2 > 0.05 > np.std(near_iid)
