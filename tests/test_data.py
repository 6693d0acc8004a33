"""CIFAR-10 from a prepared directory (helpers.data): the synthetic stand-in, tfds loading, never a download, a bad archive never replaces a good dataset."""

import gzip
import shutil

import numpy as np
import pytest

from helpers import data
from helpers.errors import CourseError


def test_synthetic_archive_is_cifar_binary_format(synthetic_archive, tmp_path):
    import tarfile

    with tarfile.open(synthetic_archive) as tar:
        payload = tar.extractfile(data.PREFIX + data.TEST_FILE).read()
        names = tar.extractfile(data.PREFIX + data.META_FILE).read().decode().split()
    assert len(payload) == 100 * data.RECORD
    assert names == data.LABELS
    labels = np.frombuffer(payload, np.uint8)[:: data.RECORD]
    assert labels.max() <= 9


@pytest.mark.parametrize("train, test", [(0, 10), (10, -5), (5, 100), (10, 10**9)])
def test_synthetic_nonsense_sizes(tmp_path, train, test):
    with pytest.raises(CourseError, match="not a sensible size"):
        data.synth_archive(tmp_path / "x.tar.gz", train=train, test=test)
    assert not (tmp_path / "x.tar.gz").exists()


def test_prepare_then_standard_tfds_load(prepared_dir):
    import tensorflow_datasets as tfds

    train = tfds.load("cifar10", data_dir=str(prepared_dir), split="train", download=False)
    test = tfds.load("cifar10", data_dir=str(prepared_dir), split="test", download=False)
    assert sum(1 for _ in train) == 300 and sum(1 for _ in test) == 100
    info = data.dataset_info(prepared_dir)
    assert info.synthetic and info.label.startswith("SYNTHETIC")
    assert (info.train_size, info.test_size) == (300, 100)


def test_missing_dataset_is_a_clear_error_without_download(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def no_download(*args, **kwargs):  # the offline trap: tfds would retry for minutes
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", no_download)
    with pytest.raises(CourseError, match="data prepare"):
        data.load_split("train", tmp_path)
    with pytest.raises(CourseError, match="COURSE_DATA_DIR"):
        monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
        data.ensure_data(quick=False)


def _truncate(src, dst, keep):
    raw = gzip.open(src).read()
    with gzip.open(dst, "wb") as out:
        out.write(raw[:keep])


@pytest.mark.parametrize("damage", ["truncated-gzip", "truncated-record", "not-an-archive", "missing"])
def test_bad_archive_never_replaces_a_good_dataset(tmp_path, synthetic_archive, prepared_dir, damage):
    target = tmp_path / "tfds"
    shutil.copytree(prepared_dir, target)
    before = sorted(p.name for p in (target / "cifar10" / "3.0.2").iterdir())
    bad = tmp_path / "bad.tar.gz"
    if damage == "truncated-gzip":
        bad.write_bytes(synthetic_archive.read_bytes()[:5000])
    elif damage == "truncated-record":
        import tarfile, io

        with tarfile.open(synthetic_archive) as src, tarfile.open(bad, "w:gz") as out:
            for member in src.getmembers():
                payload = src.extractfile(member).read()
                if member.name.endswith("data_batch_3.bin"):
                    payload = payload[:-100]
                member.size = len(payload)
                out.addfile(member, io.BytesIO(payload))
    elif damage == "not-an-archive":
        bad.write_text("hello")
    with pytest.raises(CourseError) as info:
        data.prepare(bad, target)
    assert "\n" not in str(info.value)
    assert sorted(p.name for p in (target / "cifar10" / "3.0.2").iterdir()) == before
    assert data.dataset_info(target).train_size == 300
    assert not [p for p in target.iterdir() if p.name.startswith(".prepare-")]
