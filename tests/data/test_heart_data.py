"""FLamby's Fed-Heart-Disease from the published UCI files: sizes, preparation, refusals."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fairfl.data import load_client_data, partition_sizes
from fairfl.data.files import DataFileError
from fairfl.data.heart import SOURCE, load_centres, one_hot_drop_first, parse_centre
from fairfl.settings import RunSettings

#: FLamby's train/test sizes of Cleveland, Hungary, Switzerland and Long Beach VA
#: (``flamby/datasets/fed_heart_disease``: 199/104, 172/89, 30/16, 85/45).
FLAMBY_SIZES = [(199, 104), (172, 89), (30, 16), (85, 45)]


def heart(root, partition_id, **extra):
    arguments = {
        "dataset": "fed-heart-disease",
        "partitioner": "natural",
        "num_partitions": 4,
        "data_root": str(root),
    }
    arguments.update(extra)
    return load_client_data(partition_id=partition_id, **arguments)


def test_the_four_centres_have_flambys_train_and_test_sizes(shared_data_root):
    sizes = []
    for centre in range(4):
        data = heart(shared_data_root, centre)
        assert data.x_train.shape[1:] == (13,) and data.x_train.dtype == np.float32
        assert set(np.unique(data.y_train)) <= {0, 1} and data.y_train.dtype == np.int64
        sizes.append((len(data.y_train), len(data.y_test)))
    assert sizes == FLAMBY_SIZES
    assert partition_sizes(
        dataset="fed-heart-disease",
        partitioner="natural",
        num_partitions=4,
        data_root=str(shared_data_root),
    ) == [train for train, _ in FLAMBY_SIZES]


def test_each_centre_is_normalised_by_its_own_training_statistics(shared_data_root):
    for centre in range(4):
        data = heart(shared_data_root, centre)
        mean, std = data.x_train.mean(axis=0), data.x_train.std(axis=0, ddof=1)
        constant = std < 1e-6  # a feature constant in the centre maps to 0
        np.testing.assert_allclose(mean, 0.0, atol=1e-6)
        np.testing.assert_allclose(std[~constant], 1.0, rtol=1e-5)
        assert not np.any(data.x_train[:, constant])


def test_the_preparation_equals_flambys_pandas_code(shared_data_root):
    # FLamby's HeartDiseaseRaw (flamby/datasets/fed_heart_disease/dataset.py, newest
    # commit), transcribed: pandas reading, dummies and per-centre statistics in torch.
    pd = pytest.importorskip("pandas")
    torch = pytest.importorskip("torch")
    from sklearn.model_selection import train_test_split

    folder = shared_data_root / SOURCE.folder
    features, labels, centres, sets = pd.DataFrame(), pd.DataFrame(), [], []
    for number, name in enumerate(("cleveland", "hungarian", "switzerland", "va")):
        frame = pd.read_csv(folder / f"processed.{name}.data", header=None)
        frame = frame.replace("?", np.nan).drop([10, 11, 12], axis=1).dropna(axis=0)
        frame = frame.apply(pd.to_numeric)
        x, y = frame.iloc[:, :-1], frame.iloc[:, -1]
        features = pd.concat((features, x), ignore_index=True)
        labels = pd.concat((labels, y), ignore_index=True)
        centres += [number] * x.shape[0]
        binary = y.where(y == 0, 1, inplace=False)
        levels = np.unique(binary)
        stratify = (
            binary if len(levels) > 1 and all((binary == v).sum() > 2 for v in levels) else None
        )
        _, test = train_test_split(
            np.arange(len(y)),
            test_size=1.0 - 0.66,
            train_size=0.66,
            random_state=43,
            shuffle=True,
            stratify=stratify,
        )
        sets += ["test" if i in test else "train" for i in range(len(y))]
    dummies = pd.get_dummies(features, columns=[2, 6], drop_first=True)
    table = torch.from_numpy(dummies.to_numpy(dtype=np.float32))
    target = (labels.to_numpy().ravel() != 0).astype(np.int64)
    centres, sets = np.array(centres), np.array(sets)
    prepared = load_centres(str(shared_data_root), False)
    for number, mine in enumerate(prepared):
        train = torch.from_numpy((centres == number) & (sets == "train"))
        test = torch.from_numpy((centres == number) & (sets == "test"))
        mean, std = table[train].mean(0), table[train].std(0)
        expected_train = ((table[train] - mean) / (std + 1e-9)).numpy()
        expected_test = ((table[test] - mean) / (std + 1e-9)).numpy()
        # Equal up to the float32 rounding of the statistics (torch's summation order).
        np.testing.assert_allclose(mine.x_train, expected_train, rtol=0, atol=1e-6)
        np.testing.assert_allclose(mine.x_test, expected_test, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(mine.y_train, target[train.numpy()])
        np.testing.assert_array_equal(mine.y_test, target[test.numpy()])


def test_parse_drops_columns_10_to_12_then_incomplete_rows_and_binarises_the_label():
    text = (
        "63,1,1,145,233,1,2,150,0,2.3,3,0,6,0\n"  # complete: kept, label 0
        "35,1,4,?,0,?,0,130,1,?,?,?,7,3\n"  # missing in kept columns: dropped
        "32,1,1,95,0,0,0,127,0,.7,1,?,?,2\n"  # missing only in 10-12: kept, label 1
    )
    features, labels = parse_centre(text)
    np.testing.assert_array_equal(
        features,
        [[63, 1, 1, 145, 233, 1, 2, 150, 0, 2.3], [32, 1, 1, 95, 0, 0, 0, 127, 0, 0.7]],
    )
    np.testing.assert_array_equal(labels, [0, 1])


def test_one_hot_is_get_dummies_with_drop_first():
    # columns 2 and 6 take values {1, 3, 4} and {0, 2}: dummies 2_3, 2_4, then 6_2
    rows = np.array(
        [
            [0, 1, 1, 3, 4, 5, 0, 7, 8, 9],
            [0, 1, 4, 3, 4, 5, 2, 7, 8, 9],
            [0, 1, 3, 3, 4, 5, 0, 7, 8, 9],
        ],
        dtype=np.float64,
    )
    expected = [
        [0, 1, 3, 4, 5, 7, 8, 9, 0, 0, 0],
        [0, 1, 3, 4, 5, 7, 8, 9, 0, 1, 1],
        [0, 1, 3, 4, 5, 7, 8, 9, 1, 0, 0],
    ]
    np.testing.assert_array_equal(one_hot_drop_first(rows), expected)


def test_validation_is_carved_from_the_training_split_and_the_test_split_stays(shared_data_root):
    plain = heart(shared_data_root, 0)
    tuned = heart(shared_data_root, 0, validation_fraction=0.2, seed=3)
    assert (len(tuned.y_train), len(tuned.y_val)) == (159, 40)  # round(0.2 * 199) = 40
    np.testing.assert_array_equal(tuned.x_test, plain.x_test)
    both = np.concatenate([tuned.x_train, tuned.x_val])
    assert sorted(map(bytes, both)) == sorted(map(bytes, plain.x_train))


def test_a_corrupted_file_is_refused_naming_it_and_its_digest(shared_data_root, tmp_path):
    folder = tmp_path / SOURCE.folder
    shutil.copytree(shared_data_root / SOURCE.folder, folder)
    damaged = folder / "processed.va.data"
    content = bytearray(damaged.read_bytes())
    content[100] ^= 0x01  # one byte changed
    damaged.write_bytes(bytes(content))
    with pytest.raises(
        DataFileError, match=r"processed\.va\.data.*4249d03ca7711e84f4444768c9426170"
    ):
        heart(tmp_path, 3)


def test_a_missing_file_names_where_to_download_it(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        heart(tmp_path, 0)
    message = str(error.value)
    assert "archive.ics.uci.edu/ml/machine-learning-databases/heart-disease/" in message
    assert str(tmp_path / "uci-heart-disease") in message and "download=true" in message


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"num_partitions": 5}, r"num_partitions must be 4 for dataset 'fed-heart-disease'"),
        ({"num_partitions": 3}, r"num_partitions must be 4 for dataset 'fed-heart-disease'"),
        ({"partitioner": "iid"}, r"partitioner must be 'natural' for dataset 'fed-heart-disease'"),
        ({"test_fraction": 0.2}, r"test_fraction must be left at its default 0.3"),
    ],
)
def test_other_federations_of_the_hospitals_are_refused_naming_the_key(
    shared_data_root, extra, message
):
    with pytest.raises(ValueError, match=message):
        heart(shared_data_root, 0, **extra)


def test_the_run_config_takes_the_hospitals_as_its_clients_unless_told_otherwise():
    settings = RunSettings.from_run_config({"dataset": "fed-heart-disease"})
    assert (settings.num_partitions, settings.partitioner) == (4, "natural")
    given = RunSettings.from_run_config({"dataset": "fed-heart-disease", "num-partitions": 5})
    assert given.num_partitions == 5  # checked as given: refused where the data are cut
