"""The UCI Letter reader of the lab (forgetting_lab.datasets.letter): R's .rda files (XDR)
decoded, the loader's checks of its source, and the dataset itself when r-cran-mlbench is
installed."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import source_missing


# -- the k ≥ 20 dataset's reader (R .rda, XDR) ---------------------------------------------
def _xdr_rda(columns: dict, levels: list[str]) -> bytes:
    """A minimal xz-compressed .rda holding one data frame ``LetterRecognition``."""
    import lzma
    import struct

    def i32(v):
        return struct.pack(">i", v)

    def charsxp(s):
        b = s.encode()
        return i32(0x00040009) + i32(len(b)) + b

    def strsxp(items):
        return i32(16) + i32(len(items)) + b"".join(charsxp(s) for s in items)

    def sym(name):
        return i32(1) + charsxp(name)

    def attrs(pairs):  # pairlist of (tag, value)
        out = b""
        for tag, value in pairs:
            out += i32(2 | (1 << 10)) + sym(tag) + value
        return out + i32(254)

    def intsxp(values, attr=None):
        flags = 13 | ((1 << 9) if attr else 0)
        body = i32(flags) + i32(len(values)) + b"".join(i32(int(v)) for v in values)
        return body + (attrs(attr) if attr else b"")

    names = list(columns)
    vec = []
    for name in names:
        values = columns[name]
        if name == "lettr":
            vec.append(intsxp(values, [("levels", strsxp(levels)), ("class", strsxp(["factor"]))]))
        else:
            vec.append(i32(14) + i32(len(values)) + b"".join(struct.pack(">d", v) for v in values))
    frame = i32(19 | (1 << 9)) + i32(len(vec)) + b"".join(vec)
    frame += attrs([("names", strsxp(names)), ("class", strsxp(["data.frame"]))])
    body = b"X\n" + i32(2) + i32(0x040003) + i32(0x020300)
    body += i32(2 | (1 << 10)) + sym("LetterRecognition") + frame + i32(254)
    return lzma.compress(b"RDX2\n" + body)


def test_rda_reader_decodes_a_data_frame(tmp_path) -> None:
    from forgetting_lab.datasets.letter import read_rda

    path = tmp_path / "LetterRecognition.rda"
    path.write_bytes(_xdr_rda({"lettr": [2, 1, 3], "x.box": [1.0, 2.5, 15.0]}, ["A", "B", "C"]))
    frame = read_rda(path)["LetterRecognition"]
    assert frame.attr("names") == ["lettr", "x.box"]
    lettr, xbox = frame.value
    assert lettr.value.tolist() == [2, 1, 3] and lettr.attr("levels") == ["A", "B", "C"]
    assert xbox.value.tolist() == [1.0, 2.5, 15.0]


def test_letter_loader_checks_its_source(tmp_path, monkeypatch) -> None:
    from forgetting_lab.datasets import DatasetUnavailableError
    from forgetting_lab.datasets.letter import load_letter

    monkeypatch.setenv("FORGETTING_MLBENCH_DIR", str(tmp_path))
    with pytest.raises(DatasetUnavailableError, match="r-cran-mlbench"):
        load_letter()
    letters = [chr(ord("A") + i) for i in range(26)]
    cols = {"lettr": [1, 2]} | {f"f{j}": [0.0, 15.0] for j in range(16)}
    (tmp_path / "LetterRecognition.rda").write_bytes(_xdr_rda(cols, letters))
    with pytest.raises(ValueError, match="20000 rows"):
        load_letter()


def test_letter_dataset_when_installed() -> None:
    from forgetting_lab.datasets import DatasetUnavailableError
    from forgetting_lab.datasets.letter import load_letter

    try:
        ds = load_letter(n_train=500)
    except DatasetUnavailableError as err:
        source_missing(err)  # fails instead of skipping when CI requires every source
    assert ds.X_train.shape == (500, 16) and ds.X_test.shape == (4000, 16)
    assert ds.n_classes == 26 and 0.0 <= ds.X_train.min() and ds.X_train.max() <= 1.0
    assert np.bincount(ds.y_test, minlength=26).min() > 100
