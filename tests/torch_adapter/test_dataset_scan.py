"""The user's own Dataset that wrote a batch's NaN: found in the frames on the stack
(through a DataLoader, random_split's Subset, a ConcatDataset), read item by item, and
the item that holds NaN replayed op by op to the op on the user's line."""

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import ConcatDataset, DataLoader, Dataset, TensorDataset  # noqa: E402

from gradient_doctor.torch_adapter.localize import dataset_scan  # noqa: E402


class Standardised(Dataset):
    """Rows standardised by their own spread: a flat row divides by 0."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        row = self.rows[index]
        return (row - row.mean()) / row.std(), index


def test_a_getitem_that_divides_by_a_zero_spread_is_replayed_to_its_op():
    rows = torch.randn(20, 6)
    rows[13] = 4.0  # flat
    own = Standardised(rows)
    train, _ = torch.utils.data.random_split(own, [15, 5])
    loader = DataLoader(ConcatDataset([train, TensorDataset(rows)]), batch_size=4)  # noqa: F841
    found = dataset_scan.datasets_in_reach()
    assert found == [own]  # the TensorDataset only indexes what it was given
    origin, item = dataset_scan.pipeline_origin(found)
    assert item is None  # an op of it made the value: its origin says where
    assert origin.stage == "`Standardised.__getitem__`"
    assert origin.element.startswith("item 13 of the dataset")
    made = origin.evidence.origin
    assert (made.op, made.framework_op) == ("RealDiv", "div")
    assert made.source.code.strip() == "return (row - row.mean()) / row.std(), index"


class FromTable(Dataset):
    """Rows of a table read as they are, standardised in NumPy (no torch op)."""

    def __init__(self, table):
        self.table = table

    def __len__(self):
        return len(self.table)

    def __getitem__(self, index):
        row = self.table[index]
        return torch.from_numpy((row - 1.0) / 2.0), torch.tensor([0.0])


def test_an_item_whose_nan_the_data_held_is_named_by_its_index_and_position():
    import numpy as np

    table = np.ones((12, 5), dtype=np.float32)
    table[7, 3] = np.nan  # a missing cell of the file
    own = FromTable(table)
    loader = DataLoader(own, batch_size=4)  # noqa: F841
    origin, item = dataset_scan.pipeline_origin(dataset_scan.datasets_in_reach())
    assert origin is None
    assert (item.dataset, item.index) == ("FromTable", 7)
    assert item.where == "its tensor 1 of 2 (shape 5) holds 1 NaN, at flat position 3"
