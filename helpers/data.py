"""CIFAR-10 through tensorflow-datasets, offline: preparing it and reading its splits.

Compute nodes have no internet, and a plain `tfds.load('cifar10')` offline retries for
minutes before failing. So the course never lets tfds download: a user downloads
`cifar-10-binary.tar.gz` once on a login node and runs `python -m helpers data prepare`,
which builds the standard tfds `cifar10` into a `data_dir`; every notebook and job then
reads that directory. Quick mode uses a small *synthetic* archive in the same binary
format (`python -m helpers data synth`), prepared the same way and labelled synthetic
wherever it is shown.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import atomic
from .errors import CourseError
from .settings import value

DATA_DIR_ENV = "COURSE_DATA_DIR"
TFDS_NAME, TFDS_VERSION = "cifar10", "3.0.2"
PREFIX = "cifar-10-batches-bin/"
TRAIN_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)]
TEST_FILE = "test_batch.bin"
META_FILE = "batches.meta.txt"
RECORD = 1 + 32 * 32 * 3  # label byte + channel-major image
TRAIN_SIZE, TEST_SIZE = 50_000, 10_000  # CIFAR-10's splits
LABELS = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
SOURCE_FILE = "course_source.json"
MAX_SYNTH = 1_000_000
PREPARE_HINT = ("download cifar-10-binary.tar.gz on a login node and run `python -m helpers data "
                "prepare --archive cifar-10-binary.tar.gz --data-dir DIR`")


# --------------------------------------------------------------------- synthetic archive
def synth_archive(out: str | os.PathLike, train: int = 2048, test: int = 512, seed: int = 0) -> Path:
    """Write a synthetic archive in CIFAR-10 binary format whose images carry a class signal.

    Each class has a fixed coarse colour pattern; an image is that pattern plus strong
    noise, so a small CNN learns it in a few epochs and quick-mode curves go somewhere.
    The result is *not* CIFAR-10 and is marked synthetic once prepared.
    """
    for name, value in (("train", train), ("test", test)):
        if not isinstance(value, (int, np.integer)) or not 10 <= value <= MAX_SYNTH:
            raise CourseError(f"--{name} {value!r} is not a sensible size: give a whole number "
                              f"of images from 10 to {MAX_SYNTH:,}")
    rng = np.random.default_rng(seed)
    templates = rng.uniform(0, 255, size=(10, 3, 4, 4))

    def records(count: int) -> bytes:
        labels = rng.integers(0, 10, size=count)
        coarse = np.kron(templates[labels], np.ones((1, 1, 8, 8)))  # (count, 3, 32, 32)
        noise = rng.uniform(0, 255, size=coarse.shape)
        images = np.clip(0.3 * coarse + 0.7 * noise, 0, 255).astype(np.uint8)
        rows = np.concatenate([labels.astype(np.uint8)[:, None], images.reshape(count, -1)], axis=1)
        return rows.tobytes()

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = np.array_split(np.arange(train), len(TRAIN_FILES))
    members = {PREFIX + f: records(len(p)) for f, p in zip(TRAIN_FILES, parts)}
    members[PREFIX + TEST_FILE] = records(test)
    members[PREFIX + META_FILE] = ("\n".join(LABELS) + "\n").encode()
    members[PREFIX + "readme.html"] = (b"SYNTHETIC data in CIFAR-10 binary format, made by "
                                       b"`python -m helpers data synth`. Not CIFAR-10.\n")
    with atomic.replaced(out) as tmp, tarfile.open(tmp, "w:gz") as tar:  # never half an archive
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, _BytesReader(payload))
    return out


class _BytesReader:
    def __init__(self, payload: bytes):
        self._payload, self._pos = payload, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._payload) if size < 0 else self._pos + size
        chunk, self._pos = self._payload[self._pos:end], min(end, len(self._payload))
        return chunk


# --------------------------------------------------------------------------- prepare
def _extract_checked(archive: Path, into: Path) -> Path:
    """Extract the archive, checking it holds complete CIFAR-10 binary batches."""
    if not archive.is_file():
        raise CourseError(f"archive {archive} does not exist: {PREPARE_HINT}")
    try:
        with tarfile.open(archive, "r:*") as tar:
            names = set(tar.getnames())
            missing = [f for f in TRAIN_FILES + [TEST_FILE, META_FILE] if PREFIX + f not in names]
            if missing:
                raise CourseError(f"{archive} is not a CIFAR-10 binary archive: it lacks "
                                  f"{', '.join(missing)} (expected cifar-10-binary.tar.gz)")
            root = into / PREFIX
            root.mkdir(parents=True)
            for name in TRAIN_FILES + [TEST_FILE, META_FILE, "readme.html"]:
                member = tar.extractfile(PREFIX + name) if PREFIX + name in names else None
                if member is not None:  # only the files we know, never paths the archive chooses
                    (root / name).write_bytes(member.read())
    except (tarfile.TarError, EOFError, zlib.error, OSError, KeyError) as exc:
        raise CourseError(f"{archive} is truncated or corrupt ({type(exc).__name__}): download "
                          "it again and check its size (about 162 MB for the real archive)") from None
    root = into / PREFIX
    for name in TRAIN_FILES + [TEST_FILE]:
        size = (root / name).stat().st_size
        if size == 0 or size % RECORD:
            raise CourseError(f"{archive}: {name} holds {size} bytes, not whole {RECORD}-byte "
                              "records: the archive is truncated or corrupt, download it again")
    return into


def _archive_is_synthetic(extracted: Path) -> bool:
    readme = extracted / PREFIX / "readme.html"
    return readme.is_file() and readme.read_bytes().startswith(b"SYNTHETIC")


def prepare(archive: str | os.PathLike, data_dir: str | os.PathLike) -> Path:
    """Build the tfds `cifar10` dataset in `data_dir` from a local archive, without network.

    The dataset is built under a temporary name and renamed into place, so a failure never
    replaces a good dataset with half of one.
    """
    archive, data_dir = Path(archive).expanduser(), Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".prepare-", dir=data_dir) as scratch:
        scratch = Path(scratch)
        extracted = _extract_checked(archive, scratch / "extracted")
        builder = _local_builder(extracted, scratch / "tfds")
        builder.download_and_prepare(download_config=_offline_download_config())
        built = scratch / "tfds" / TFDS_NAME / TFDS_VERSION
        source = {"synthetic": _archive_is_synthetic(extracted), "archive": archive.name}
        (built / SOURCE_FILE).write_text(json.dumps(source))
        target = data_dir / TFDS_NAME / TFDS_VERSION
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            old = scratch / "replaced"
            os.replace(target, old)
        os.replace(built, target)
    return target


def _offline_download_config():
    import tensorflow_datasets as tfds

    return tfds.download.DownloadConfig(try_download_gcs=False)


def _local_builder(extracted: Path, data_dir: Path):
    """The standard tfds CIFAR-10 builder, reading an extracted archive instead of the web."""
    from tensorflow_datasets.image_classification.cifar import Cifar10

    class _LocalDownloads:
        def download_and_extract(self, url):
            return str(extracted)

    class LocalCifar10(Cifar10, skip_registration=True):
        name = TFDS_NAME

        def _split_generators(self, dl_manager):
            return super()._split_generators(_LocalDownloads())

    return LocalCifar10(data_dir=str(data_dir))


# ------------------------------------------------------------------------------ load
@dataclass(frozen=True)
class DataInfo:
    """What a prepared data_dir holds; `synthetic` must be shown wherever data is shown."""

    data_dir: Path
    synthetic: bool
    train_size: int
    test_size: int
    label_names: list[str]

    @property
    def label(self) -> str:
        return "SYNTHETIC CIFAR-10-format data" if self.synthetic else "CIFAR-10"


def dataset_info(data_dir: str | os.PathLike) -> DataInfo:
    """Describe a prepared data_dir, or raise a clear error (in milliseconds, no network)."""
    version_dir = Path(data_dir).expanduser() / TFDS_NAME / TFDS_VERSION
    info_file = version_dir / "dataset_info.json"
    if not info_file.is_file():
        raise CourseError(f"no prepared CIFAR-10 in {data_dir} (looked for {info_file}): "
                          f"{PREPARE_HINT}")
    info = json.loads(info_file.read_text())
    sizes = {s["name"]: sum(int(n) for n in s.get("shardLengths", [])) for s in info.get("splits", [])}
    source_file = version_dir / SOURCE_FILE
    synthetic = json.loads(source_file.read_text()).get("synthetic", False) if source_file.is_file() else False
    names_file = version_dir / "label.labels.txt"
    names = names_file.read_text().split() if names_file.is_file() else LABELS
    return DataInfo(Path(data_dir), synthetic, sizes.get("train", 0), sizes.get("test", 0), names)


def quick_data_dir() -> Path:
    """Where quick mode keeps its synthetic dataset (per user, outside the repository)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tf-hpc-course" / "synthetic-cifar10"


def ensure_data(quick: bool, data_dir: str | os.PathLike | None = None) -> DataInfo:
    """The data_dir a run uses: explicit, else `COURSE_DATA_DIR`, else (quick) synthetic.

    In quick mode without a data_dir, a small synthetic dataset is made and prepared once
    (about 3 s); workshop and full mode need a prepared real CIFAR-10 and say how to make one.
    """
    chosen = data_dir or value(DATA_DIR_ENV)
    if chosen:
        return dataset_info(chosen)
    if not quick:
        raise CourseError(f"workshop and full mode need real CIFAR-10: set {DATA_DIR_ENV} to a prepared "
                          f"data_dir ({PREPARE_HINT})")
    target = quick_data_dir()
    try:
        return dataset_info(target)
    except CourseError:
        pass
    with _lock(target.parent / ".prepare.lock"):
        try:
            return dataset_info(target)  # another process prepared it while we waited
        except CourseError:
            print(f"Preparing a small SYNTHETIC CIFAR-10-format dataset in {target} (once) ...")
            archive = synth_archive(target.parent / "synthetic-cifar-10-binary.tar.gz")
            prepare(archive, target)
    return dataset_info(target)


class _lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        os.close(self._fd)


def load_split(split: str, data_dir: str | os.PathLike, limit: int | None = None,
               shuffle_files: bool = False, seed: int = 42):
    """(image uint8, label) pairs of a prepared split, read by tfds without any download."""
    import tensorflow_datasets as tfds

    dataset_info(data_dir)  # clear error first, never a download attempt
    builder = tfds.builder(TFDS_NAME, data_dir=str(data_dir))
    read_config = tfds.ReadConfig(shuffle_seed=seed)
    ds = builder.as_dataset(split=split, as_supervised=True, shuffle_files=shuffle_files,
                            read_config=read_config)
    return ds.take(limit) if limit else ds
