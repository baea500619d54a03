"""Exact preprocessing steps: every change of rows leaves a step as a fit on the rows held.

Each step is driven through the protocol the pipeline uses (``update_rows`` with the changed rows
and the rows held after the change) over random interleavings of forgets and inserts, and
compared with a fresh fit on the rows held: equal digests (so equal integer statistics and
parameters), and when the step answers "output unchanged" the output for every held row must
be the same bits. Also: the statistics against numpy and scikit-learn, unknown categories,
all-NaN columns, the translation of scikit-learn's steps and its refusals.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import preprocessing as skp
from sklearn.compose import ColumnTransformer as SkColumnTransformer
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer as SkSimpleImputer
from sklearn.pipeline import make_pipeline as sk_make_pipeline

from forgetting.preprocessing import (
    Chain,
    ColumnTransformer,
    MinMaxScaler,
    MissingIndicator,
    NotExactError,
    OneHotEncoder,
    OnSchemaRows,
    OrdinalEncoder,
    Passthrough,
    SimpleImputer,
    StandardScaler,
    exact,
)
from forgetting.preprocessing.base import Rows, same_output
from forgetting.preprocessing.statistics import Moments, ValueCounts, new_hash
from forgetting.preprocessing.table import Table, concat_rows, read_input, select, take


# -- a small mixed table and a driver that plays the pipeline's part ----------------------------
def mixed_table(n: int, seed: int = 0) -> Table:
    rng = np.random.default_rng(seed)
    num = rng.normal(size=n) * 10.0 ** rng.integers(-2, 3, size=n)
    num[rng.random(n) < 0.1] = np.nan
    small = rng.integers(0, 4, size=n).astype(np.float64)
    cities = np.array(["Oslo", "Paris", "Rome", "Lima", "Quito"], dtype=object)
    city = cities[rng.integers(0, 5, size=n)]
    city[rng.random(n) < 0.1] = None
    rare = np.full(n, "common", dtype=object)
    rare[rng.integers(0, n)] = "only-once"
    return Table((num, small, city, rare), ("num", "small", "city", "rare"))


def digest(step) -> bytes:
    h = new_hash()
    step.digest_into(h)
    return h.digest()


class Driver:
    """Holds rows and a step, and changes them as the pipeline does; every row is in D° with
    probability 1/3 (fixed per row), so D°-fitted steps see D° change too."""

    def __init__(self, step, X, seed=0):
        self.X = X
        self.n = len(X.columns[0]) if isinstance(X, Table) else X.shape[0]
        self.schema = np.random.default_rng(seed + 1).random(self.n) < 1 / 3
        self.held = np.ones(self.n, dtype=bool)
        self.step = step
        step.fit_rows(Rows(X, None, self.schema))

    def rows(self, mask, which="all"):
        idx = np.flatnonzero(mask & self.schema) if which == "schema" else np.flatnonzero(mask)
        return Rows(take(self.X, idx), None, None if which == "schema" else self.schema[idx])

    def change(self, idx, sign):
        after = self.held.copy()
        after[idx] = sign > 0
        old = copy.deepcopy(self.step)
        delta = Rows(take(self.X, idx), None, self.schema[idx])
        schema_changed = bool(self.schema[idx].any())
        staying = after & self.held

        def current(which):
            return self.rows(staying if which == "staying" else after, which)

        changed = self.step.update_rows(old, delta, sign, schema_changed, current)
        self.held = after
        held = self.rows(after).X
        if not changed:
            stay = self.rows(staying).X
            assert same_output(old.transform(stay), self.step.transform(stay))
        fresh = copy.deepcopy(self.step)
        fresh.fit_rows(self.rows(after))
        assert digest(self.step) == digest(fresh)
        assert same_output(fresh.transform(held), self.step.transform(held))
        return changed


STEPS = {
    "scaler-schema": lambda: Chain([("pick", _num()), ("s", StandardScaler())]),
    "scaler-all": lambda: Chain([("pick", _num()), ("s", StandardScaler(rows="all"))]),
    "minmax-all": lambda: Chain([("pick", _num()), ("s", MinMaxScaler(rows="all"))]),
    "mean-all": lambda: Chain([("pick", _num()), ("i", SimpleImputer(rows="all"))]),
    "median-all": lambda: Chain(
        [("pick", _num()), ("i", SimpleImputer(strategy="median", rows="all"))]
    ),
    "most-frequent-all": lambda: SimpleImputer(strategy="most_frequent", rows="all"),
    "most-frequent-schema": lambda: SimpleImputer(strategy="most_frequent"),
    "constant": lambda: SimpleImputer(strategy="constant"),
    "missing-indicator": lambda: Chain([("pick", _num()), ("m", MissingIndicator())]),
    "onehot": lambda: OneHotEncoder(handle_unknown="ignore"),
    "onehot-drop-first": lambda: OneHotEncoder(drop="first"),
    "ordinal": lambda: OrdinalEncoder(),
    "column-transformer": lambda: ColumnTransformer(
        [
            ("num", Chain([("i", SimpleImputer(rows="all")), ("s", StandardScaler())]), ["num"]),
            ("cat", OneHotEncoder(), ["city", "rare"]),
            ("keep", "passthrough", ["small"]),
        ]
    ),
    "remainder": lambda: ColumnTransformer(
        [("cat", OrdinalEncoder(), [2, 3]), ("gone", "drop", [1])], remainder="passthrough"
    ),
}


def _num():
    return ColumnTransformer([("n", Passthrough(), ["num", "small"])])


@pytest.mark.parametrize("name", sorted(STEPS))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_every_step_follows_forgets_and_inserts_exactly(name, data):
    n = 60
    X = mixed_table(n, seed=data.draw(st.integers(0, 3)))
    driver = Driver(STEPS[name](), X)
    for _ in range(data.draw(st.integers(1, 5))):
        held = np.flatnonzero(driver.held)
        gone = np.flatnonzero(~driver.held)
        if gone.size and data.draw(st.booleans()):
            k = data.draw(st.integers(1, min(4, gone.size)))
            idx = np.array(data.draw(st.permutations(gone.tolist()))[:k])
            driver.change(idx, +1)
        elif held.size > 10:
            k = data.draw(st.integers(1, 4))
            idx = np.array(data.draw(st.permutations(held.tolist()))[:k])
            driver.change(idx, -1)


def test_forgetting_a_category_s_last_row_changes_the_output_and_equals_a_refit():
    X = select(mixed_table(40), [2, 3])  # city, rare
    last = int(np.flatnonzero(X.columns[1] == "only-once")[0])
    driver = Driver(OneHotEncoder(), X)
    width = driver.step.transform(X).shape[1]
    assert driver.change(np.array([last]), -1) is True
    assert driver.step.transform(take(X, driver.held)).shape[1] == width - 1
    assert driver.change(np.array([last]), +1) is True  # and back: the category returns


def test_a_schema_row_leaving_refits_a_d_degree_step_and_others_leave_it_alone():
    X = read_input(np.random.default_rng(0).normal(size=(50, 3)))[0]
    driver = Driver(StandardScaler(), X)
    outside = np.flatnonzero(~driver.schema)[:3]
    assert driver.change(outside, -1) is False
    inside = np.flatnonzero(driver.schema)[:1]
    assert driver.change(inside, -1) is True


# -- the statistics ---------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.floats(-1e12, 1e12, allow_nan=False, allow_subnormal=False),
            st.just(np.nan),
            st.just(0.0),
        ),
        min_size=2,
        max_size=40,
    ),
    k=st.integers(1, 5),
)
def test_moments_after_subtracting_rows_equal_the_moments_of_the_rest(values, k):
    X = np.array(values, dtype=np.float64).reshape(-1, 1)
    k = min(k, len(values) - 1)
    m = Moments.of(X)
    if not m.update(X[:k], -1):
        m = Moments.of(X[k:])  # the grid moved: the caller recomputes
    fresh = Moments.of(X[k:])
    h1, h2 = new_hash(), new_hash()
    m.digest_into(h1)
    fresh.digest_into(h2)
    assert h1.digest() == h2.digest()
    present = X[k:, 0][~np.isnan(X[k:, 0])]
    if present.size:
        top = np.abs(present).max()
        assert abs(m.mean()[0] - present.mean()) <= 2.0**-30 * max(top, 1e-300) + 1e-12 * top


def test_moments_refuse_a_grid_change_and_keep_their_state():
    X = np.array([[1.0], [2.0], [1000.0]])
    m = Moments.of(X)
    before = copy.deepcopy(m)
    assert m.update(X[2:], -1) is False  # the maximum's binade leaves: a new grid
    assert m.state()["s1"].tolist() == before.state()["s1"].tolist()
    assert m.update(X[:1], -1) is True


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=30), st.integers(0, 10))
def test_value_counts_give_numpy_s_median_and_scikit_learn_s_most_frequent(values, k):
    col = np.array(values, dtype=np.float64)
    counts = ValueCounts.of(col)
    assert counts.median() == np.median(col)
    ref = SkSimpleImputer(strategy="most_frequent").fit(col.reshape(-1, 1)).statistics_[0]
    assert counts.most_frequent() == ref
    k = min(k, len(values) - 1)
    counts.update(col[:k], -1)
    rest = ValueCounts.of(col[k:])
    assert counts.values.tolist() == rest.values.tolist()
    assert counts.counts.tolist() == rest.counts.tolist()


# -- against scikit-learn ---------------------------------------------------------------------
def test_the_exact_steps_compute_what_scikit_learn_s_do():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4)) * [1, 10, 1e-3, 1e4] + [0, 5, 1, -3]
    X[rng.random(X.shape) < 0.1] = np.nan
    ours = StandardScaler(rows="all").fit(X)
    theirs = skp.StandardScaler().fit(X)
    np.testing.assert_allclose(ours.mean_, theirs.mean_, rtol=1e-8)
    np.testing.assert_allclose(ours.scale_, theirs.scale_, rtol=1e-7)
    for strategy in ("median", "most_frequent", "constant"):
        a = SimpleImputer(strategy=strategy, rows="all").fit_transform(X)
        b = SkSimpleImputer(strategy=strategy).fit_transform(X)
        assert np.array_equal(a, b), strategy
    a = SimpleImputer(rows="all").fit_transform(X)  # the mean: 31 bits below the largest value
    np.testing.assert_allclose(a, SkSimpleImputer().fit_transform(X), rtol=1e-8)
    cats = np.array([["b", "x"], ["a", None], ["c", "x"], ["a", "y"]], dtype=object)
    table = read_input(cats)[0]
    sk = skp.OneHotEncoder(sparse_output=False).fit(cats)
    assert np.array_equal(OneHotEncoder().fit(table).transform(table), sk.transform(cats))
    sk = skp.OneHotEncoder(sparse_output=False, drop="if_binary").fit(cats[:, :1])
    mine = OneHotEncoder(drop="if_binary").fit(read_input(cats[:, :1])[0])
    assert np.array_equal(mine.transform(read_input(cats[:, :1])[0]), sk.transform(cats[:, :1]))
    lo = MinMaxScaler(rows="all").fit_transform(np.nan_to_num(X))
    np.testing.assert_allclose(lo, skp.MinMaxScaler().fit_transform(np.nan_to_num(X)))


def test_given_categories_keep_their_order_and_refuse_others_at_fit():
    X = read_input(np.array([["low"], ["high"], ["mid"]], dtype=object))[0]
    enc = OrdinalEncoder(categories=[["low", "mid", "high"]]).fit(X)
    assert enc.transform(X)[:, 0].tolist() == [0.0, 2.0, 1.0]
    bad = read_input(np.array([["low"], ["huge"]], dtype=object))[0]
    with pytest.raises(ValueError, match=r"unknown categories \['huge'\] in column 0 during fit"):
        OrdinalEncoder(categories=[["low", "mid", "high"]]).fit(bad)


def test_unknown_categories_at_transform_follow_handle_unknown():
    fit = read_input(np.array([["Oslo"], ["Rome"]], dtype=object))[0]
    new = read_input(np.array([["Lima"], ["Rome"]], dtype=object))[0]
    with pytest.raises(ValueError, match=r"unknown categories \['Lima'\] in column 0"):
        OneHotEncoder().fit(fit).transform(new)
    out = OneHotEncoder(handle_unknown="ignore").fit(fit).transform(new)
    assert out.tolist() == [[0.0, 0.0], [0.0, 1.0]]
    enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1).fit(fit)
    assert enc.transform(new)[:, 0].tolist() == [-1.0, 1.0]


def test_an_all_nan_column_is_dropped_or_kept_as_scikit_learn_does():
    X = np.array([[1.0, np.nan], [3.0, np.nan], [np.nan, np.nan]])
    assert SimpleImputer(rows="all").fit_transform(X).tolist() == [[1.0], [3.0], [2.0]]
    kept = SimpleImputer(rows="all", keep_empty_features=True).fit_transform(X)
    assert kept[:, 1].tolist() == [0.0, 0.0, 0.0]
    ref = SkSimpleImputer(keep_empty_features=True).fit_transform(X)
    assert np.array_equal(kept, ref)


def test_forgetting_a_column_s_last_value_drops_the_column_exactly():
    X = read_input(np.array([[1.0, 5.0], [2.0, np.nan], [3.0, np.nan]]))[0]
    driver = Driver(SimpleImputer(rows="all"), X)
    assert driver.step.transform(X).shape[1] == 2
    assert driver.change(np.array([0]), -1) is True
    assert driver.step.transform(X).shape[1] == 1


# -- translation and refusals -----------------------------------------------------------------
def test_scikit_learn_s_steps_translate_to_exact_ones():
    ct = SkColumnTransformer(
        [
            ("num", sk_make_pipeline(SkSimpleImputer(), skp.StandardScaler()), ["a"]),
            ("cat", skp.OneHotEncoder(handle_unknown="ignore"), ["b"]),
        ],
        remainder="passthrough",
    )
    step = exact(ct, "prep")
    assert isinstance(step, ColumnTransformer)
    chain = step.transformers[0][1]
    assert isinstance(chain, Chain)
    assert [type(s).__name__ for _, s in chain.steps] == ["SimpleImputer", "StandardScaler"]
    assert step.transformers[1][1].handle_unknown == "ignore"
    assert step.remainder == "passthrough"
    assert isinstance(exact(skp.OrdinalEncoder()), OrdinalEncoder)
    assert isinstance(exact("passthrough"), Passthrough)
    assert exact(skp.StandardScaler(with_mean=False)).with_mean is False


@pytest.mark.parametrize(
    "step, words",
    [
        (PCA(n_components=2), ["'pca'", "PCA", "OnSchemaRows"]),
        (skp.OneHotEncoder(min_frequency=5), ["min_frequency"]),
        (SkSimpleImputer(add_indicator=True), ["add_indicator"]),
        (skp.PolynomialFeatures(), ["PolynomialFeatures"]),
        (skp.StandardScaler().set_output(transform="default"), []),
    ],
)
def test_steps_without_an_exact_translation_are_refused_by_name(step, words):
    if not words:
        assert isinstance(exact(step, "pca"), StandardScaler)
        return
    with pytest.raises(NotExactError) as err:
        exact(step, "pca")
    for word in words:
        assert word in str(err.value)


def test_a_step_wrapped_on_schema_rows_is_fitted_on_those_rows_only():
    rng = np.random.default_rng(0)
    X = read_input(rng.normal(size=(40, 5)))[0]
    driver = Driver(OnSchemaRows(PCA(n_components=2, random_state=0)), X)
    ref = PCA(n_components=2, random_state=0).fit(X[driver.schema])
    assert np.allclose(driver.step.transformer_.components_, ref.components_)
    assert driver.change(np.flatnonzero(~driver.schema)[:2], -1) is False
    assert driver.change(np.flatnonzero(driver.schema)[:1], -1) is True


def test_a_callable_column_selector_is_refused():
    from sklearn.compose import make_column_selector

    X = mixed_table(10)
    with pytest.raises(ValueError, match="callable column selector"):
        ColumnTransformer([("n", Passthrough(), make_column_selector())]).fit(X)


# -- the edge: raw tables ---------------------------------------------------------------------
def test_raw_tables_are_read_with_clear_errors():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "x": [1.0, None, 3.0],
            "c": pd.Categorical(["a", "b", None]),
            "s": pd.array(["u", None, "w"], dtype="string"),
            "b": [True, False, True],
        }
    )
    table, layout = read_input(df)
    assert layout.kinds == ("num", "text", "text", "num")
    assert table.columns[1].tolist() == ["a", "b", None]
    again, _ = read_input(df[["s", "b", "x", "c"]], layout)  # reordered: matched by name
    assert [c.tolist() for c in again.columns[1:3]] == [["a", "b", None], ["u", None, "w"]]
    with pytest.raises(ValueError, match=r"lacks the fitted columns \['b'\]"):
        read_input(df[["x", "c", "s"]], layout)
    with pytest.raises(ValueError, match=r"not seen at fit: \['z'\]"):
        read_input(df.assign(z=1), layout)
    with pytest.raises(ValueError, match="column 'x' holds text"):
        read_input(df.assign(x=["p", "q", "r"]), layout)
    with pytest.raises(ValueError, match="mixes strings and numbers"):
        read_input(pd.DataFrame({"m": ["a", 1, "b"]}))
    with pytest.raises(ValueError, match="no rows"):
        read_input(df.iloc[:0], layout)
    with pytest.raises(ValueError, match="infinity"):
        read_input(np.array([[1.0, np.inf]]))
    rows = concat_rows([table, take(table, np.array([0]))])
    assert rows.n_rows == 4
