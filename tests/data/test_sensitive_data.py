"""Data sets with a sensitive attribute: UCI Adult's files and the planted-bias generator."""

import gzip
import shutil

import numpy as np
import pytest

from fairfl.data import dataset_info, load_client_data, partition_sizes
from fairfl.data.files import DataFileError
from fairfl.data.sensitive import (
    ADULT_NUM_FEATURES,
    encode_adult,
    load_adult,
    parse_adult,
    read_adult,
    read_adult_rows,
    synthetic_pool,
)

# UCI's published MD5s of the two files (the usual Adult loaders check the same).
ADULT_DATA_MD5 = "5d7c39d7b8804f071cdd1f2a7c460872"
ADULT_TEST_MD5 = "35238206dfdf7f1fe215bbb874adecdc"
UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"

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


def encoded(sensitive="sex"):
    table = parse_adult({"adult.data": DATA.encode(), "adult.test": TEST.encode()})
    x, a = encode_adult([list(row) for row in table.rows], sensitive)
    return x, table.labels, a, table.from_test_file


def test_adult_files_are_parsed_and_encoded():
    x, y, a, from_test = encoded()
    # 3 rows of adult.data (the '?' row dropped) + 2 of adult.test; 6 numeric + 99 one-hot.
    assert x.shape == (5, ADULT_NUM_FEATURES) == (5, 105)
    assert y.tolist() == [0, 1, 0, 0, 1]
    assert a.tolist() == [1, 1, 0, 1, 0]  # sex: Male 1
    assert from_test.tolist() == [False, False, False, True, True]
    # age standardised: ages 39, 50, 37, 25, 52, mean 40.6, population std sqrt(95.44).
    assert x[0, 0] == pytest.approx(-1.6 / np.sqrt(95.44), rel=1e-6)
    # One-hot: sex is columns 62 (Female), 63 (Male): 6 + 8+16+7+14+6+5 categories before.
    assert x[:, 62].tolist() == [0, 0, 1, 0, 1] and x[:, 63].tolist() == [1, 1, 0, 1, 0]
    assert np.all(x[:, 6:].sum(axis=1) == 8)  # one category per categorical column
    _, _, race, _ = encoded("race")
    assert race.tolist() == [1, 1, 1, 0, 1]  # White 1, Black 0


def raw_rows(root, name):
    """The published file's data rows, split by hand (no fairfl parser)."""
    with gzip.open(root / "uci-adult" / f"{name}.gz", "rt") as handle:
        lines = [line for line in handle.read().splitlines() if line.strip()]
    return [[f.strip() for f in line.split(",")] for line in lines if not line.startswith("|")]


def test_the_published_adult_files_are_verified_and_read(shared_data_root, tmp_path):
    # UCI's counts: 32,561 rows in adult.data and 16,281 in adult.test.
    data, test = raw_rows(shared_data_root, "adult.data"), raw_rows(shared_data_root, "adult.test")
    assert (len(data), len(test)) == (32_561, 16_281)
    complete = [sum("?" not in row for row in rows) for rows in (data, test)]
    table = read_adult(str(shared_data_root))
    assert len(table.rows) == sum(complete) and table.from_test_file.sum() == complete[1]
    positives = sum(row[-1].rstrip(".") == ">50K" for row in data + test if "?" not in row)
    assert table.labels.sum() == positives
    # The plain layout, as UCI serves the files, reads the same rows.
    plain = tmp_path / "uci-adult"
    plain.mkdir()
    for name in ("adult.data", "adult.test"):
        with gzip.open(shared_data_root / "uci-adult" / f"{name}.gz") as source:
            (plain / name).write_bytes(source.read())
    assert read_adult(str(tmp_path)).rows == table.rows


def test_a_truncated_adult_file_is_refused_naming_it_and_its_digest(shared_data_root, tmp_path):
    folder = tmp_path / "uci-adult"
    folder.mkdir()
    with gzip.open(shared_data_root / "uci-adult" / "adult.data.gz") as source:
        (folder / "adult.data").write_bytes(source.read()[:-1000])
    shutil.copy(shared_data_root / "uci-adult" / "adult.test.gz", folder)
    with pytest.raises(DataFileError, match=ADULT_DATA_MD5) as error:
        load_adult(tmp_path)
    assert "adult.data" in str(error.value) and "adult.test" not in str(error.value)


def test_adult_client_data_carries_the_attribute(shared_data_root):
    data = load_client_data(
        dataset="adult",
        partitioner="iid",
        partition_id=0,
        num_partitions=1,
        test_fraction=0.4,
        data_root=str(shared_data_root),
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


def test_missing_adult_files_say_where_to_get_and_put_them(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_adult(tmp_path)
    message = str(error.value)
    for url in (UCI + "adult.data", UCI + "adult.test"):
        assert url in message
    assert str(tmp_path / "uci-adult") in message and "download=true" in message


def test_the_phd_split_is_afls(shared_data_root):
    # AFL's clients: education Doctorate (client 0) and the rest; adult.data trains and
    # adult.test tests. Counted by hand from the files, rows with a '?' dropped.
    data, test = raw_rows(shared_data_root, "adult.data"), raw_rows(shared_data_root, "adult.test")
    # Hu et al. (IEEE TNSE 2022): "the phd domain has only 413 samples while the non-phd
    # domain has 32,148": adult.data with the '?' rows kept, as the q-FFL code keeps them.
    assert sum(row[3] == "Doctorate" for row in data) == 413
    assert sum(row[3] != "Doctorate" for row in data) == 32_148

    def count(rows, phd):
        return sum((row[3] == "Doctorate") == phd and "?" not in row for row in rows)

    root = str(shared_data_root)
    kwargs = {"dataset": "adult", "partitioner": "phd", "num_partitions": 2, "data_root": root}
    phd, rest = (load_client_data(partition_id=k, **kwargs) for k in (0, 1))
    assert (len(phd.y_train), len(phd.y_test)) == (count(data, True), count(test, True))
    assert (len(rest.y_train), len(rest.y_test)) == (count(data, False), count(test, False))
    assert partition_sizes(**kwargs) == [count(data, True), count(data, False)]
    doctorate = 6 + 8 + 13  # numeric columns, workclass, then education's 14th category
    assert phd.x_train[:, doctorate].min() == 1 and rest.x_test[:, doctorate].max() == 0


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"num_partitions": 3}, "num_partitions must be 2 for partitioner 'phd'"),
        ({"dataset": "digits"}, "dataset must be 'adult' for partitioner 'phd'"),
        ({"test_fraction": 0.2}, "test_fraction must be left at its default"),
    ],
)
def test_the_phd_split_refuses_other_federations(change, key):
    kwargs = {"dataset": "adult", "partitioner": "phd", "num_partitions": 2, **change}
    with pytest.raises(ValueError, match=key):
        partition_sizes(**kwargs)


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


def test_dirichlet_skews_the_sex_mix_of_real_adult(shared_data_root):
    kwargs = {
        "dataset": "adult",
        "partitioner": "dirichlet",
        "num_partitions": 5,
        "data_root": str(shared_data_root),
    }
    heterogeneous = [
        load_client_data(partition_id=k, dirichlet_alpha=0.1, **kwargs).a_train.mean()
        for k in range(5)
    ]
    near_iid = [
        load_client_data(partition_id=k, dirichlet_alpha=5000.0, **kwargs).a_train.mean()
        for k in range(5)
    ]
    assert np.std(heterogeneous) > 0.2 > 0.05 > np.std(near_iid)
