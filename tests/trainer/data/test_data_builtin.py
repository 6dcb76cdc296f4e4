import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from trainer.data import PARTITIONS, assign_groups, load_dataset
from trainer.data.partition import dirichlet_partition, iid_partition, one_label_partition


def _same(a, b) -> bool:
    return (
        torch.equal(a.train_x, b.train_x)
        and torch.equal(a.train_y, b.train_y)
        and torch.equal(a.test_x, b.test_x)
        and all(torch.equal(p, q) for p, q in zip(a.client_indices, b.client_indices))
    )


def test_synthetic_is_reproducible_from_seed() -> None:
    first = load_dataset("synthetic", num_clients=12, partition="natural", seed=5)
    again = load_dataset("synthetic", num_clients=12, partition="natural", seed=5)
    other = load_dataset("synthetic", num_clients=12, partition="natural", seed=6)
    assert _same(first, again)
    assert not torch.equal(first.train_x[:10], other.train_x[:10])


def test_synthetic_shape_and_heterogeneity() -> None:
    data = load_dataset("synthetic:0.5,0.5", num_clients=30, partition="natural", seed=0)
    assert data.input_shape == (60,) and data.num_classes == 10
    assert data.client_ids[0] == "device-00000" and data.num_clients == 30
    sizes = data.client_sizes()
    assert min(sizes) >= 45 and len(set(sizes)) > 10  # lognormal sizes + 50, 10% held out
    # Each device's labels come from its own model: label distributions differ by device.
    histograms = np.stack([np.bincount(data.train_y[rows].numpy(), minlength=10) / rows.numel()
                           for rows in data.client_indices])
    assert histograms.std(axis=0).mean() > 0.05
    homogeneous = load_dataset("synthetic:0,0", num_clients=30, partition="natural", seed=0)
    assert homogeneous.train_x.shape[1] == 60


def test_synthetic_parameters_must_parse() -> None:
    with pytest.raises(InvalidInputError) as info:
        load_dataset("synthetic:1", num_clients=3, seed=0)
    assert info.value.field == "dataset"


def test_leaf_synthetic_shape_sizes_and_seed() -> None:
    data = load_dataset("leaf_synthetic", num_clients=40, partition="natural", seed=3)
    assert data.input_shape == (60,) and data.num_classes == 5 and data.num_clients == 40
    assert data.client_ids[-1] == "device-00039"
    sizes = np.array(data.client_sizes())
    # floor(LogNormal(3, 2)) + 5 capped at 1000 per device, 10% (at least one) held out
    assert sizes.min() >= 4 and sizes.max() <= 900 and len(set(sizes.tolist())) > 10
    assert _same(data, load_dataset("leaf_synthetic", num_clients=40, partition="natural", seed=3))
    assert not _same(data, load_dataset("leaf_synthetic", num_clients=40, partition="natural", seed=4))
    wider = load_dataset("leaf_synthetic", num_clients=5, seed=0, num_classes=3, num_features=7)
    assert wider.input_shape == (7,) and wider.num_classes == 3
    with pytest.raises(InvalidInputError) as info:
        load_dataset("leaf_synthetic", num_clients=5, seed=0, clusters=0)
    assert info.value.field == "clusters"


def test_leaf_synthetic_devices_share_a_model() -> None:
    """One linear model fits LEAF's devices together: their models are one model up to a
    0.1 perturbation (docs/trainer.md §Data, "leaf_synthetic")."""
    data = load_dataset("leaf_synthetic", num_clients=60, partition="natural", seed=0, max_samples_per_client=100)
    # the least-squares linear classifier of the pooled data (one-hot targets, a bias column)
    design = np.c_[np.ones(len(data.train_y)), data.train_x.numpy()]
    weights = np.linalg.lstsq(design, np.eye(data.num_classes)[data.train_y.numpy()], rcond=None)[0]
    predicted = (np.c_[np.ones(len(data.test_y)), data.test_x.numpy()] @ weights).argmax(axis=1)
    accuracy = float((predicted == data.test_y.numpy()).mean())
    majority = np.bincount(data.test_y.numpy()).max() / len(data.test_y)
    assert accuracy > max(0.8, majority + 0.3)


def test_digits_iid_split() -> None:
    data = load_dataset("digits", num_clients=10, seed=0)
    assert data.input_shape == (1, 8, 8) and data.num_classes == 10
    assert data.train_y.shape[0] + data.test_y.shape[0] == 1797
    assert data.test_y.shape[0] == round(0.2 * 1797)
    sizes = data.client_sizes()
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == data.train_y.shape[0]
    rows = torch.cat(data.client_indices)
    assert rows.unique().numel() == rows.numel()  # disjoint
    assert abs(float(data.train_x.mean())) < 1e-3  # standardised


def test_digits_has_no_natural_clients() -> None:
    with pytest.raises(InvalidInputError) as info:
        load_dataset("digits", num_clients=4, partition="natural", seed=0)
    assert info.value.field == "partition"


def _label_skew(parts: list[np.ndarray], labels: np.ndarray) -> float:
    """Mean share of a client's most frequent label."""
    return float(np.mean([np.bincount(labels[p], minlength=10).max() / p.size for p in parts]))


def test_dirichlet_skews_labels_as_alpha_shrinks() -> None:
    labels = np.repeat(np.arange(10), 200)
    skew = [_label_skew(dirichlet_partition(labels, 20, alpha, seed=1), labels)
            for alpha in (100.0, 1.0, 0.05)]
    assert skew[0] < 0.25 < skew[1] < skew[2]
    assert skew[2] > 0.8
    iid = _label_skew(iid_partition(labels.size, 20, seed=1), labels)
    assert iid < 0.25


def test_dirichlet_partition_is_a_partition_of_equal_sizes() -> None:
    labels = np.random.default_rng(0).integers(0, 7, 1003)
    parts = dirichlet_partition(labels, 9, 0.1, seed=2)
    joined = np.concatenate(parts)
    assert np.array_equal(np.sort(joined), np.arange(1003))
    assert {p.size for p in parts} <= {111, 112}
    again = dirichlet_partition(labels, 9, 0.1, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_dirichlet_through_load_dataset() -> None:
    skewed = load_dataset("digits", num_clients=10, partition="dirichlet", alpha=0.05, seed=0)
    flat = load_dataset("digits", num_clients=10, partition="dirichlet", alpha=100.0, seed=0)
    labels = skewed.train_y.numpy()
    parts_s = [r.numpy() for r in skewed.client_indices]
    parts_f = [r.numpy() for r in flat.client_indices]
    assert _label_skew(parts_s, labels) > _label_skew(parts_f, labels) + 0.3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"partition": "sharded"}, "partition"),
        ({"partition": "dirichlet", "alpha": 0.0}, "alpha"),
        ({"num_clients": 0}, "num_clients"),
        ({"num_clients": 5000}, "num_clients"),
        ({"colour": True}, "colour"),
    ],
)
def test_bad_partition_arguments(kwargs: dict, field: str) -> None:
    arguments = {"num_clients": 4, "seed": 0, **kwargs}
    with pytest.raises(InvalidInputError) as info:
        load_dataset("digits", **arguments)
    assert info.value.field == field


def test_unknown_dataset_names_dataset() -> None:
    with pytest.raises(InvalidInputError) as info:
        load_dataset("imagenet", num_clients=3, seed=0)
    assert info.value.field == "dataset" and "imagenet" in info.value.message


def test_max_test_samples_subsamples_the_test_set() -> None:
    data = load_dataset("digits", num_clients=3, seed=0, max_test_samples=50)
    assert data.test_y.shape[0] == 50


def test_partitions_listed() -> None:
    assert PARTITIONS == ("iid", "dirichlet", "one_label", "natural")


def test_assign_groups_sizes_and_seed() -> None:
    groups = assign_groups([3, 5, 2], 10, seed=4)
    assert sorted(groups) == [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]
    assert assign_groups([3, 5, 2], 10, seed=4) == groups
    assert any(assign_groups([3, 5, 2], 10, seed=s) != groups for s in range(5, 10))


def test_assign_groups_leaves_extra_clients_out_and_refuses_too_few() -> None:
    groups = assign_groups([2, 2], 7, seed=0)
    assert groups.count(-1) == 3 and groups.count(0) == 2 and groups.count(1) == 2
    with pytest.raises(InvalidInputError) as info:
        assign_groups([4, 4], 7, seed=0)
    assert info.value.field == "num_clients" and "num_clients=8" in info.value.message


@pytest.mark.parametrize("num_clients", [10, 37, 200])
def test_one_label_partition_gives_every_client_one_label(num_clients: int) -> None:
    labels = np.repeat(np.arange(10), [300, 250, 200, 200, 150, 150, 100, 100, 50, 33])
    parts = one_label_partition(labels, num_clients, seed=3)
    assert len(parts) == num_clients and all(p.size > 0 for p in parts)
    rows = np.concatenate(parts)
    assert np.array_equal(np.sort(rows), np.arange(labels.size))  # a partition of all samples
    assert all(np.unique(labels[p]).size == 1 for p in parts)
    per_label = np.bincount([labels[p[0]] for p in parts], minlength=10)
    assert per_label.min() >= 1  # every label has a client
    expected = num_clients * np.bincount(labels) / labels.size
    assert np.abs(per_label - expected).max() <= 1  # clients in proportion to label counts
    for label in range(10):  # a label's clients hold near-equal shares
        sizes = [p.size for p in parts if labels[p[0]] == label]
        assert max(sizes) - min(sizes) <= 1
    again = one_label_partition(labels, num_clients, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    first_labels = [labels[p[0]] for p in parts]
    assert first_labels != sorted(first_labels)  # client order does not follow labels


def test_one_label_partition_at_the_edges() -> None:
    # a rare label still gets a client of its own, and no label more clients than samples
    labels = np.array([0] * 50 + [1] * 2)
    parts = one_label_partition(labels, 51, seed=0)
    assert sum(labels[p[0]] == 1 for p in parts) in (1, 2) and all(p.size >= 1 for p in parts)
    with pytest.raises(InvalidInputError) as info:
        one_label_partition(labels, 53, seed=0)
    assert info.value.field == "num_clients"
    # fewer clients than labels: the labels left without a client are unused
    parts = one_label_partition(np.repeat(np.arange(5), 10), 3, seed=0)
    assert len(parts) == 3 and sum(p.size for p in parts) == 30


def test_one_label_digits_with_local_test_splits() -> None:
    data = load_dataset("digits", num_clients=40, partition="one_label", seed=1, client_test_fraction=0.25)
    assert data.has_client_tests and data.client_test_indices is not None
    for client in range(data.num_clients):
        train, test = data.client_indices[client], data.client_test_indices[client]
        assert set(train.tolist()).isdisjoint(test.tolist())
        size = train.numel() + test.numel()
        assert test.numel() == min(max(round(0.25 * size), 1), size - 1)
        labels = torch.cat([data.train_y[train], data.train_y[test]]).unique()
        assert labels.numel() == 1  # its local test data has its own label
    everything = torch.cat([*data.client_indices, *data.client_test_indices])
    assert torch.equal(everything.sort().values, torch.arange(data.train_y.shape[0]))
    x, y = data.client_test_data(3)
    assert x.shape[0] == data.client_test_indices[3].numel() and y.unique().numel() == 1


@pytest.mark.parametrize("partition", ["iid", "dirichlet"])
def test_client_test_fraction_holds_out_a_seeded_share(partition: str) -> None:
    data = load_dataset("digits", num_clients=8, partition=partition, seed=2, client_test_fraction=0.2)
    plain = load_dataset("digits", num_clients=8, partition=partition, seed=2)
    assert plain.client_test_indices is None and not plain.has_client_tests
    assert data.client_test_indices is not None
    for mine, theirs, test in zip(data.client_indices, plain.client_indices, data.client_test_indices):
        # the same clients, each split into its training and local test rows
        assert sorted(mine.tolist() + test.tolist()) == theirs.tolist()
    assert torch.equal(data.test_y, plain.test_y)  # the server's test set is unchanged
    again = load_dataset("digits", num_clients=8, partition=partition, seed=2, client_test_fraction=0.2)
    assert again.client_test_indices is not None
    assert all(torch.equal(a, b) for a, b in zip(data.client_test_indices, again.client_test_indices))


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_client_test_fraction_out_of_range_is_refused(fraction: float) -> None:
    with pytest.raises(InvalidInputError) as info:
        load_dataset("digits", num_clients=4, seed=0, client_test_fraction=fraction)
    assert info.value.field == "client_test_fraction"


def test_client_test_fraction_needs_two_samples_per_client() -> None:
    with pytest.raises(InvalidInputError) as info:
        load_dataset("digits", num_clients=1437, seed=0, client_test_fraction=0.5)
    assert info.value.field == "client_test_fraction"
