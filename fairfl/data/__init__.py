"""Data sets, partitioners and per-client train/test splits.

``load_client_data(dataset=..., partitioner=..., partition_id=i,
num_partitions=n)`` gives client i its share of a data set as numpy arrays,
identically in simulation and on a real SuperNode.

Data sets (`DATASETS`):

- ``"digits"``: scikit-learn's bundled 8x8 handwritten digits (1,797 samples),
  the embedded default; needs no files.
- ``"synthetic"``: Synthetic(1, 1) of FedProx / q-FFL, generated in numpy;
  ``"synthetic-<α>-<β>"`` (e.g. ``"synthetic-0-0"``, ``"synthetic-0.5-0.5"``)
  sets α and β, ``"synthetic-<α>-<β>-sigma<σ>"`` also the spread of the device sizes
  (``LogNormal(4, σ) + 50``; the reference σ = 2 by default). One device per
  partition (partitioner ``"natural"`` only).
- ``"adult"`` (UCI Adult, from ``data_root/uci-adult/``, each file's MD5 checked) and
  ``"adult-synthetic"`` (a planted sensitive attribute and bias, numpy): binary tasks
  whose samples carry a sensitive attribute (``ClientData.a_train``...), for group
  fairness (`fairfl.data.sensitive`); ``"dirichlet"`` skews their attribute mix, and
  ``"phd"`` splits Adult into AFL's two clients (PhD, non-PhD; adult.test tests).
- ``"fed-heart-disease"``: FLamby's Fed-Heart-Disease, UCI Heart Disease's four
  hospitals as four clients (partitioner ``"natural"``, ``num_partitions`` 4), read from
  ``data_root/uci-heart-disease/`` with each file's MD5 checked and prepared exactly as
  FLamby does, with its fixed train/test split (`fairfl.data.heart`).
- ``"mnist"``, ``"fashionmnist"``, ``"cifar10"``: the official training sets,
  read by torchvision from ``data_root`` (downloaded only if ``download=True``),
  then partitioned and re-split per client.

Partitioners (`PARTITIONERS`): ``"iid"``, ``"dirichlet"`` (label skew),
``"shards"`` (pathological label-sorted shards), ``"groups"`` (planted
label-disjoint client groups of unequal size, `fairfl.data.groups`), ``"phd"``
(Adult's PhD / non-PhD clients), ``"natural"`` (synthetic devices, the hospitals of
``"fed-heart-disease"``).

Partition index lists are also cached on disk, in ``$FAIRFL_CACHE_DIR/partitions``
(default ``~/.cache/fairfl/partitions``; ``FAIRFL_CACHE_DIR=off`` disables it), so a
fresh ClientApp process per message does not partition again (`fairfl.data.cache`).
"""

from fairfl.data.client_data import ClientData, load_client_data, partition_sizes
from fairfl.data.partition import PARTITIONERS
from fairfl.data.sources import DATASETS, DatasetInfo, dataset_info

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "ClientData",
    "DatasetInfo",
    "dataset_info",
    "load_client_data",
    "partition_sizes",
]
