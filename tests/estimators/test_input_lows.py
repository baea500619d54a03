"""Inputs no estimator can take are refused at the edge with one line (issue 73, the lows).

Before: a DataFrame with a 100k-category column made QSS's built-in encoding allocate a dense
n × categories matrix (74.5 GiB); a complex column lost its imaginary part in silence (or
dumped the whole frame into a multi-line error); repeated column names gave AttributeError;
a text column into the exact forest gave "could not convert string to float" naming neither
the column nor the category dtype; a datetime column gave numpy's DTypePromotionError. Each
is now one ValueError line naming the column and saying what to do, raised before anything
is allocated or fitted — at fit, and at predict/insert of a fitted model.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from forgetting import ExactForestClassifier, QSSClassifier
from forgetting.preprocessing.frames import MAX_CATEGORIES

pd = pytest.importorskip("pandas")

N = 300
RNG = np.random.default_rng(0)
Y = RNG.integers(0, 2, N)
KEY = b"a secret of at least sixteen bytes"


def qss():
    return QSSClassifier(random_state=0, rho=0.3, rebuild="sync")


def forest():
    return ExactForestClassifier(random_state=0, n_instances=1, n_estimators=3)


FAMILIES = [pytest.param(qss, id="qss"), pytest.param(forest, id="forest")]


def numbers(n=N):
    rng = np.random.default_rng(1)
    return pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})


def one_line(err: pytest.ExceptionInfo, *words: str) -> None:
    text = str(err.value)
    assert err.type is ValueError, f"{err.type.__name__}: {text[:200]}"
    assert "\n" not in text and len(text) < 400, text
    for word in words:
        assert word in text, text


# -- a column with more categories than the built-in encoding takes ---------------------------
def test_a_column_with_too_many_categories_is_refused_before_the_dense_encoding():
    """4,000 rows, each its own category: the dense one-hot (4,000 × 4,000 float64, 128 MB)
    is never allocated; the refusal names the column and the limit."""
    n = 4 * MAX_CATEGORIES
    X = numbers(n).assign(user=pd.Categorical([f"u{i}" for i in range(n)]))
    y = np.arange(n) % 2
    tracemalloc.start()
    try:
        with pytest.raises(Exception) as err:
            qss().fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    one_line(err, "'user'", f"{MAX_CATEGORIES:,}", f"{n:,}")
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_an_insert_that_takes_a_column_past_the_limit_is_refused_and_changes_nothing():
    n = MAX_CATEGORIES
    X = numbers(n).assign(user=pd.Categorical([f"u{i % (n - 2)}" for i in range(n)]))
    y = np.arange(n) % 2
    model = QSSClassifier(random_state=0, rebuild="sync", secret_key=KEY).fit(X, y)
    digest = model.state_digest()
    more = numbers(3).assign(user=pd.Categorical(["new1", "new2", "new3"]))
    with pytest.raises(Exception) as err:
        model.insert(more, [0, 1, 0], ids=[n, n + 1, n + 2])
    one_line(err, "'user'", f"{MAX_CATEGORIES:,}")
    assert model.state_digest() == digest and model.n_rows_ == n


# -- complex numbers -----------------------------------------------------------------------------
@pytest.mark.parametrize("make", FAMILIES)
@pytest.mark.parametrize(
    "X",
    [
        pytest.param(numbers().assign(c=RNG.normal(size=N) + 1j), id="complex-column"),
        pytest.param(
            numbers().assign(c=RNG.normal(size=N) + 1j, t=pd.Categorical(["x", "y"] * (N // 2))),
            id="complex-beside-a-category",  # QSS's encoding dropped the imaginary part
        ),
        pytest.param(
            numbers().assign(c=pd.Series([complex(1, 2)] * N, dtype=object)), id="complex-objects"
        ),
    ],
)
def test_complex_columns_are_refused_by_name(make, X):
    with pytest.raises(Exception) as err:
        make().fit(X, Y)
    one_line(err, "'c'", "complex")


@pytest.mark.parametrize("make", FAMILIES)
def test_a_complex_array_is_refused_in_one_line(make):
    with pytest.raises(Exception) as err:
        make().fit(RNG.normal(size=(N, 3)) + 1j, Y)
    one_line(err, "complex")


@pytest.mark.parametrize("make", FAMILIES)
def test_a_fitted_model_refuses_complex_rows_too(make):
    X = numbers()
    model = make().fit(X, Y)
    with pytest.raises(Exception) as err:
        model.predict(X.assign(b=X["b"] + 1j))
    one_line(err, "'b'", "complex")
    with pytest.raises(Exception) as err:
        model.predict(X.to_numpy() + 1j)
    one_line(err, "complex")


# -- repeated column names -----------------------------------------------------------------------
@pytest.mark.parametrize("make", FAMILIES)
@pytest.mark.parametrize("with_text", [False, True])
def test_a_repeated_column_name_is_named(make, with_text):
    X = numbers().assign(t=pd.Categorical(RNG.choice(["x", "y"], N)) if with_text else 1.0)
    X.columns = ["a", "b", "a"]
    with pytest.raises(Exception) as err:
        make().fit(X, Y)
    one_line(err, "'a'", "2 times")


# -- text into the forest ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [object, "string"])
def test_a_text_column_into_the_forest_says_which_and_to_use_a_category_dtype(dtype):
    X = numbers().assign(city=pd.Series(RNG.choice(["Oslo", "Rome"], N), dtype=dtype))
    with pytest.raises(Exception) as err:
        forest().fit(X, Y)
    one_line(err, "'city'", "category")
    fitted = forest().fit(X.assign(city=X["city"].astype("category")), Y)  # the way out
    with pytest.raises(Exception) as err:
        fitted.predict(X)  # the same column as text at predict
    one_line(err, "'city'", "category")


# -- dates and times -----------------------------------------------------------------------------
@pytest.mark.parametrize("make", FAMILIES)
@pytest.mark.parametrize(
    "column",
    [
        pytest.param(pd.date_range("2020-01-01", periods=N, freq="D"), id="datetime"),
        pytest.param(pd.date_range("2020-01-01", periods=N, freq="D", tz="UTC"), id="tz"),
        pytest.param(pd.to_timedelta(np.arange(N), unit="s"), id="timedelta"),
        pytest.param(
            pd.Series(list(pd.date_range("2020-01-01", periods=N)), dtype=object), id="objects"
        ),
    ],
)
def test_a_date_column_is_refused_by_name_with_what_to_do(make, column):
    X = numbers().assign(when=column)
    with pytest.raises(Exception) as err:
        make().fit(X, Y)
    one_line(err, "'when'", "numbers")


@pytest.mark.parametrize("make", FAMILIES)
def test_a_date_array_is_refused_in_one_line(make):
    X = np.arange(N * 2).astype("datetime64[s]").reshape(N, 2)
    with pytest.raises(Exception) as err:
        make().fit(X, Y)
    one_line(err, "numbers")
