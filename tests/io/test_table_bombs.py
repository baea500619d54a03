"""Crafted data files are refused before anything is allocated (issue 40, M4).

An NPZ is a ZIP of ``.npy`` members, each with a header declaring its shape and dtype. numpy
allocates the declared array before reading a byte of it, so a 400-byte file declaring shape
(10^11, 5) asks for 3.6 TiB, and a 7.7 MB deflate bomb (zeros, compressed 1000 to 1) for
7.45 GiB that it then fills. The reader checks each member's declared size against the ZIP's
own declared sizes and against a memory budget first, and refuses in one line.
"""

from __future__ import annotations

import io
import resource
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import pytest

from forgetting.cli import main
from forgetting.io import tables
from forgetting.io.table_types import DEFAULT_MAX_TABLE_BYTES, TableError, parse_size

#: Shape of the deflate bomb: 10^9 float64 zeros, 7.45 GiB, about 7.8 MB compressed.
BOMB_SHAPE = (200_000_000, 5)


def npy_header(shape, descr="<f8") -> bytes:
    """The bytes of a version 1.0 ``.npy`` header declaring ``shape`` of ``descr``."""
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue()


def write_lying_npz(path, shape, descr="<f8", data=b"") -> None:
    """An NPZ whose member X.npy declares ``shape`` but holds only ``data``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("X.npy", npy_header(shape, descr) + data)


class _ZeroBlocks:
    """A deflate compressor for zipfile that emits each 16 MiB block of zeros as one
    precomputed chunk (a full flush makes every chunk independent of what came before), so
    a 7.45 GiB bomb is written in seconds. Anything else goes through the real compressor."""

    def __init__(self, real, block):
        self.real, self.block = real, block
        fresh = zlib.compressobj(9, zlib.DEFLATED, -15)
        self.chunk = fresh.compress(block) + fresh.flush(zlib.Z_FULL_FLUSH)

    def compress(self, data):
        if data is self.block:
            return self.real.flush(zlib.Z_FULL_FLUSH) + self.chunk
        return self.real.compress(data)

    def flush(self, *mode):
        return self.real.flush(*mode)


def write_deflate_bomb(path, shape=BOMB_SHAPE) -> None:
    """A true NPZ of zeros (every size and CRC right): small on disk, huge in memory."""
    block = bytes(1 << 24)
    total = int(np.prod(shape)) * 8
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("X.npy", "w", force_zip64=True) as member:
            member._compressor = _ZeroBlocks(member._compressor, block)
            member.write(npy_header(shape))
            for _ in range(total // len(block)):
                member.write(block)
            member.write(bytes(total % len(block)))


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    path = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    write_deflate_bomb(path)
    return path


@pytest.fixture
def no_array_reads(monkeypatch):
    """Fail if numpy is asked to read (and so allocate) any array."""

    def refuse(*args, **kwargs):
        raise AssertionError("an array was read: the declared sizes were not checked first")

    monkeypatch.setattr(np.lib.format, "read_array", refuse)


def test_the_deflate_bomb_is_what_the_issue_describes(bomb):
    assert bomb.stat().st_size < 10_000_000
    with zipfile.ZipFile(bomb) as archive:
        assert archive.getinfo("X.npy").file_size > 7 * 2**30


def test_a_small_file_declaring_a_huge_array_is_refused(tmp_path, no_array_reads):
    path = tmp_path / "huge.npz"
    write_lying_npz(path, (10**11, 5))
    assert path.stat().st_size < 600
    with pytest.raises(TableError, match=r"X\.npy.*declares.*\(100000000000, 5\)") as err:
        tables.read_table(path)
    assert "\n" not in str(err.value)


def test_a_zero_width_dtype_with_an_astronomical_shape_is_refused(tmp_path, no_array_reads):
    path = tmp_path / "s0.npz"
    write_lying_npz(path, (2**40, 2**40), descr="|S0")
    with pytest.raises(TableError, match="declares"):
        tables.read_table(path)


def test_a_deflate_bomb_is_refused_by_the_memory_budget(bomb, no_array_reads):
    # refused from the archive's directory: no_array_reads fails the test if an array is read
    with pytest.raises(TableError, match="--max-data-size") as err:
        tables.read_table(bomb)
    assert "7.45 GiB" in str(err.value) and "\n" not in str(err.value)


def test_the_budget_is_an_option_and_a_true_file_within_it_reads(tmp_path):
    X = np.zeros((4096, 64))
    np.savez_compressed(tmp_path / "d.npz", X=X, y=np.zeros(4096, np.int64))
    with pytest.raises(TableError, match="2.00 MiB"):
        tables.read_table(tmp_path / "d.npz", max_bytes=parse_size("1M"))
    table = tables.read_table(tmp_path / "d.npz", max_bytes=parse_size("3M"))
    assert np.array_equal(table.columns["X"], X)
    assert tables.read_table(tmp_path / "d.npz").columns["y"].shape == (4096,)
    assert DEFAULT_MAX_TABLE_BYTES == parse_size("4G") == 4 * 2**30


def test_a_member_that_is_not_an_array_counts_against_the_budget(tmp_path, no_array_reads):
    with zipfile.ZipFile(tmp_path / "d.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("notes.txt", bytes(3 << 20))
    with pytest.raises(TableError, match="notes.txt"):
        tables.read_table(tmp_path / "d.npz", max_bytes=parse_size("1M"))


def test_a_truncated_member_is_refused(tmp_path, no_array_reads):
    path = tmp_path / "short.npz"
    write_lying_npz(path, (100, 5), data=bytes(8 * 499))  # one value short
    with pytest.raises(TableError, match="declares"):
        tables.read_table(path)


def test_parquet_declaring_more_rows_than_the_budget_is_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"a": np.zeros(300_000), "b": np.zeros(300_000)}), tmp_path / "d.pq")
    with pytest.raises(TableError, match="--max-data-size"):
        tables.read_table(tmp_path / "d.pq", max_bytes=parse_size("1M"))
    assert tables.read_table(tmp_path / "d.pq").columns["a"].shape == (300_000,)


def test_a_parquet_dataset_read_into_memory_is_checked_from_its_footers(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "parts"
    folder.mkdir()
    for part in range(2):
        columns = {"id": np.arange(100_000) + part * 100_000, "a": np.zeros(100_000)}
        pq.write_table(pa.table(columns), folder / f"part.{part}.parquet")
    with pytest.raises(TableError, match="200000 rows"):
        tables.read_table(folder, max_bytes=parse_size("1M"))
    assert len(tables.read_table(folder).columns["id"]) == 200_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4G", 4 << 30), ("512M", 512 << 20), ("10k", 10 << 10), ("123", 123), ("1.5G", 3 << 29)],
)
def test_sizes_parse(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "-1", "4X", "nan", "0"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


def _limited_memory(limit):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@pytest.mark.parametrize("name", ["huge", "bomb"])
def test_predict_on_a_crafted_file_is_one_line_under_a_4_gib_limit(tmp_path, bomb, name):
    """The command line, as the red team ran it: one error line, exit code 1."""
    if name == "huge":
        data = tmp_path / "huge.npz"
        write_lying_npz(data, (10**11, 5))
    else:
        data = bomb
    done = subprocess.run(
        [sys.executable, "-m", "forgetting", "predict", "--store", tmp_path / "s.db"]
        + ["--data", data],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard, not a timing claim
        preexec_fn=_limited_memory(4 * 2**30),
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("forgetting predict: error:") and "declares" in lines[0]


def test_the_cli_option_raises_the_budget(tmp_path, capsys):
    X = np.zeros((4096, 64))
    np.savez(tmp_path / "d.npz", X=X)
    code = main(
        ["predict", "--store", str(tmp_path / "s.db"), "--data", str(tmp_path / "d.npz")]
        + ["--max-data-size", "1M"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "--max-data-size" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--store", "s.db", "--data", "d.npz", "--max-data-size", "lots"])
    assert stop.value.code == 2
    code = main(
        ["predict", "--store", str(tmp_path / "s.db"), "--data", str(tmp_path / "d.npz")]
        + ["--max-data-size", "3M"]
    )
    err = capsys.readouterr().err
    assert code == 2 and "no store" in err  # the file was read; the missing store is next


def test_a_huge_bad_cell_or_id_is_named_briefly(tmp_path):
    """A 100,000-character cell or id is shown by its start and length, so the error stays one
    short line (issue 40)."""
    (tmp_path / "d.csv").write_text("id,label,a\n1,0," + "x1" * 50_000 + "\n")
    table = tables.read_table(tmp_path / "d.csv")
    with pytest.raises(TableError, match=r"\(100000 characters\)") as err:
        tables.select_features(table, columns=["a"])
    assert len(str(err.value)) < 300
    with pytest.raises(TableError) as err:
        tables.parse_id("y" * 100_000, "int")
    assert len(str(err.value)) < 300


def test_a_device_as_data_file_is_refused_unread():
    with pytest.raises(TableError, match="not a regular file"):
        tables.read_table("/dev/zero")
