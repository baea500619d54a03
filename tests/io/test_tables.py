"""Table files -> ids, labels and features (forgetting.io.tables): every cell is accounted for.

The faults these pin down (issue 9, items 4 and 5): a non-numeric or empty cell used to drop
its whole column silently, ids were stripped (so " u5 " addressed u5), and columns were matched
by position only (a later file with another column order or a missing column gave shifted
features). Each test below fails against the old reader.
"""

from __future__ import annotations

import numpy as np
import pytest

from forgetting.io import tables
from forgetting.io.tables import TableError, TableUsageError


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return tables.read_table(path)


# -- numbers: a bad cell is an error naming its line and column ------------------------------


@pytest.mark.parametrize("cell, shown", [("abc", "'abc'"), ("", "an empty cell"), ("nan", "nan")])
def test_a_bad_cell_names_its_line_and_column(tmp_path, cell, shown):
    table = write(tmp_path / "d.csv", f"id,label,f0,f1\n1,0,1.5,2\n2,1,{cell},3\n3,0,4,5\n")
    with pytest.raises(TableError) as info:
        tables.select_features(table, exclude={"id", "label"})
    message = str(info.value)
    assert "line 3" in message and "'f0'" in message and shown in message


def test_line_numbers_count_blank_lines_and_quoted_newlines(tmp_path):
    text = 'id,label,note,f0\n1,0,"two\nlines",1\n\n2,1,x,oops\n'
    table = write(tmp_path / "d.csv", text)
    assert table.lines == [2, 5]
    with pytest.raises(TableError, match=r"line 5, column 'f0': 'oops'"):
        tables.select_features(table, exclude={"id", "label"})


def test_a_text_column_is_left_out_and_reported(tmp_path):
    table = write(tmp_path / "d.csv", "id,label,f0,comment,f1\n1,0,1,hello,2\n2,1,3,,4\n")
    features = tables.select_features(table, exclude={"id", "label"})
    assert features.names == ["f0", "f1"] and features.skipped == ["comment"]
    assert np.array_equal(features.matrix, [[1.0, 2.0], [3.0, 4.0]])


def test_parquet_null_and_string_cells_are_errors_with_their_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": [1, 2, 3], "label": [0, 1, 0], "f0": [1.0, None, 2.0], "s": ["a"] * 3}),
        tmp_path / "d.parquet",
    )
    table = tables.read_table(tmp_path / "d.parquet")
    with pytest.raises(TableError, match=r"row 2, column 'f0'"):
        tables.select_features(table, exclude={"id", "label"})
    with pytest.raises(TableError, match=r"row 1, column 's': 'a'"):
        tables.select_features(table, columns=["s"])


def test_npz_matrix_names_and_non_finite_entries(tmp_path):
    X = np.arange(12.0).reshape(4, 3)
    np.savez(tmp_path / "d.npz", X=X, y=np.arange(4), ids=np.arange(4))
    table = tables.read_table(tmp_path / "d.npz")
    features = tables.select_features(table)
    assert features.names == ["X[0]", "X[1]", "X[2]"] and np.array_equal(features.matrix, X)
    X[2, 1] = np.inf
    np.savez(tmp_path / "bad.npz", X=X)
    with pytest.raises(TableError, match=r"array 'X', row 3, column 1"):
        tables.select_features(tables.read_table(tmp_path / "bad.npz"))


def test_npz_arrays_of_different_lengths_are_refused(tmp_path):
    np.savez(tmp_path / "d.npz", X=np.zeros((4, 2)), y=np.arange(3), ids=np.arange(4))
    table = tables.read_table(tmp_path / "d.npz")
    y = tables.label_column(table, task="classification")
    with pytest.raises(TableError, match="labels 3"):
        tables.check_rows(table, ids=tables.id_column(table), labels=y, features=np.zeros((4, 2)))


def test_npz_with_pickled_objects_is_refused(tmp_path):
    np.savez(tmp_path / "d.npz", X=np.array([object()], dtype=object))
    with pytest.raises(TableError, match="without Python objects"):
        tables.read_table(tmp_path / "d.npz")


# -- columns by name ------------------------------------------------------------------------


def test_match_features_reorders_by_name_and_lists_unused_columns(tmp_path):
    fitted = write(tmp_path / "fit.csv", "id,label,a,b,c\n1,0,1,2,3\n")
    names = tables.select_features(fitted, exclude={"id", "label"}).names
    later = write(tmp_path / "later.csv", "c,id,extra,a,b,label\n30,7,oops,10,20,1\n")
    features = tables.match_features(later, names, ignore={"id", "label"})
    assert np.array_equal(features.matrix, [[10.0, 20.0, 30.0]])
    assert features.unused == ["extra"]  # its bad cell does not matter: it is not read


def test_match_features_refuses_a_missing_column_and_a_bad_cell_in_a_used_one(tmp_path):
    missing = write(tmp_path / "m.csv", "id,label,a,c\n1,0,1,3\n")
    with pytest.raises(TableUsageError, match=r"lacks the column\(s\) the model was fitted on: b"):
        tables.match_features(missing, ["a", "b", "c"])
    bad = write(tmp_path / "b.csv", "id,label,a,b,c\n1,0,1,2,3\n2,0,1,x,3\n")
    with pytest.raises(TableError, match=r"line 3, column 'b'"):
        tables.match_features(bad, ["a", "b", "c"])


def test_match_features_with_named_columns_must_name_the_recorded_ones(tmp_path):
    table = write(tmp_path / "d.csv", "a,b,c\n1,2,3\n")
    assert tables.match_features(table, ["a", "b"], columns=["b", "a"]).names == ["a", "b"]
    with pytest.raises(TableUsageError, match="fitted on the columns a,b"):
        tables.match_features(table, ["a", "b"], columns=["a", "c"])


def test_match_features_for_npz_matrices_and_embedded_text(tmp_path):
    np.savez(tmp_path / "d.npz", X=np.ones((2, 3)))
    table = tables.read_table(tmp_path / "d.npz")
    assert tables.match_features(table, tables.matrix_names("X", 3)).matrix.shape == (2, 3)
    with pytest.raises(TableError, match="has 3 columns, the model was fitted on 4"):
        tables.match_features(table, tables.matrix_names("X", 4))

    def embed(texts):
        return np.array([[len(t), 1.0] for t in texts])

    texts = write(tmp_path / "t.csv", "id,body\n1,hello\n2,hi\n")
    fitted = tables.select_features(texts, text_column="body", embed=embed)
    assert fitted.names == ["minilm(body)[0]", "minilm(body)[1]"]
    again = tables.match_features(texts, fitted.names, embed=embed)
    assert np.array_equal(again.matrix, [[5.0, 1.0], [2.0, 1.0]])
    other = write(tmp_path / "o.csv", "id,text\n1,hello\n")
    with pytest.raises(TableUsageError, match="body"):
        tables.match_features(other, fitted.names, embed=embed)


# -- ids: exactly as written -----------------------------------------------------------------


def test_text_ids_are_never_rewritten():
    assert tables.parse_id(" u5 ") == " u5 "
    assert tables.parse_id(" 5") == " 5" and tables.parse_id("5 ") == "5 "
    assert tables.parse_id("42") == 42 and tables.parse_id("-7") == -7
    assert tables.parse_id("042") == "042" and tables.parse_id("+4") == "+4"
    assert tables.parse_id("42", "str") == "42"
    with pytest.raises(TableError, match="not a decimal integer"):
        tables.parse_id("u5", "int")
    assert tables.split_ids(" u5 ,u6") == [" u5 ", "u6"]
    with pytest.raises(TableUsageError, match="id 3 of 3 is empty"):
        tables.split_ids("a,b,")
    assert tables.read_id_lines("# c\n u5 \n\nu6\r\n") == [" u5 ", "u6"]


def test_id_columns_keep_their_text_and_their_type(tmp_path):
    table = write(tmp_path / "d.csv", "id,label,f0\n u5 ,0,1\n42,1,2\n042,0,3\n")
    assert tables.id_column(table) == [" u5 ", 42, "042"]
    assert tables.id_column(table, id_type="str") == [" u5 ", "42", "042"]
    np.savez(tmp_path / "d.npz", ids=np.array([3, 4]), names=np.array(["7", " a"]))
    npz = tables.read_table(tmp_path / "d.npz")
    ints = tables.id_column(npz)
    assert ints == [3, 4] and all(type(i) is int for i in ints)
    assert tables.id_column(npz, "names") == ["7", " a"]  # a string column stays strings
    assert tables.id_column(npz, id_type="str") == ["3", "4"]
    np.savez(tmp_path / "f.npz", ids=np.array([1.0, 2.5]))
    with pytest.raises(TableError, match=r"row 1, column 'ids'.*float"):
        tables.id_column(tables.read_table(tmp_path / "f.npz"))


def test_missing_id_column_is_none_only_when_optional(tmp_path):
    table = write(tmp_path / "d.csv", "label,f0\n0,1\n")
    assert tables.id_column(table, required=False) is None
    with pytest.raises(TableUsageError, match="no column 'id'"):
        tables.id_column(table)
    with pytest.raises(TableUsageError, match="no column 'key'"):
        tables.id_column(table, "key", required=False)


# -- labels and files -------------------------------------------------------------------------


def test_labels(tmp_path):
    table = write(tmp_path / "d.csv", "id,label,t\n1,cat,1.5\n2,dog,x\n3,,2\n")
    with pytest.raises(TableError, match=r"line 4, column 'label': empty label"):
        tables.label_column(table, task="classification")
    with pytest.raises(TableError, match=r"line 3, column 't': 'x'"):
        tables.label_column(table, "t", task="regression")
    ints = write(tmp_path / "i.csv", "id,label\n1,3\n2,-1\n")
    assert tables.label_column(ints, task="classification").dtype == np.int64
    np.savez(tmp_path / "d.npz", y=np.array([1.0, 0.5]))
    with pytest.raises(TableError, match="row 2.*not an integer class"):
        tables.label_column(tables.read_table(tmp_path / "d.npz"), task="classification")


def test_file_errors(tmp_path):
    with pytest.raises(TableUsageError, match="does not exist"):
        tables.read_table(tmp_path / "absent.csv")
    with pytest.raises(TableUsageError, match="cannot tell the format"):
        write(tmp_path / "d.json", "{}")
    with pytest.raises(TableUsageError, match="empty"):
        write(tmp_path / "e.csv", "")
    with pytest.raises(TableUsageError, match="name every column once"):
        write(tmp_path / "h.csv", "a,a\n1,2\n")
    with pytest.raises(TableError, match="line 3: 1 fields"):
        write(tmp_path / "w.csv", "a,b\n1,2\n3\n")
    (tmp_path / "latin.csv").write_bytes(b"a\n\xff\n")
    with pytest.raises(TableError, match="not UTF-8"):
        tables.read_table(tmp_path / "latin.csv")
