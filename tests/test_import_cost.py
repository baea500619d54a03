"""What importing the library and asking the CLI for help cost, as the modules they load.

Each check runs in a fresh interpreter and reads its ``sys.modules``: module sets are exact
where wall times are noisy. ``import forgetting`` and the estimators load no pandas, torch or
matplotlib (pandas is the caller's, imported when a DataFrame arrives); every ``--help`` of the
command line loads none of numpy, scikit-learn, faiss, numba, the estimators, the store or a
benchmark module. ``bench --help`` is the exception: it prints the paper benchmark's own
options, so it imports that benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from forgetting.cli import build_parser
from forgetting.cli.estimator import DEFAULTS, ESTIMATOR_OPTIONS, FOREST_DEFAULTS, options_of

#: Loaded only by a model family or a caller that needs them, never by the library's import.
NEVER_ON_IMPORT = ("pandas", "torch", "matplotlib")

#: Not needed to print help.
HEAVY = (
    "numpy",
    "scipy",
    "sklearn",
    "faiss",
    "numba",
    "pandas",
    "pyarrow",
    "torch",
    "matplotlib",
    "fastapi",
    "forgetting.estimators",
    "forgetting.store",
    "forgetting.schema",
    "forgetting.service",
)

#: The benchmark and audit modules the installed entry points name: help reads their
#: docstrings from source and never imports them.
PLUGINS = tuple(
    ep.module
    for group in ("forgetting.benchmarks", "forgetting.audits")
    for ep in entry_points(group=group)
)

_REPORT = """
import json, sys
try:
    {body}
except SystemExit as stop:
    code = stop.code
else:
    code = 0
sys.stdout.flush()
print("\\n" + json.dumps({{"code": code, "modules": sorted(sys.modules)}}), file=sys.stderr)
"""


def loaded_by(body: str) -> tuple[int, set[str], str]:
    """(exit code, modules in ``sys.modules`` afterwards, stdout) of ``body`` run in a fresh
    interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT.format(body=body)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"]), done.stdout


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The names (or their submodules) present in ``modules``."""
    return sorted(m for m in modules if m in names or m.startswith(tuple(n + "." for n in names)))


# -- the library ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "import forgetting",
        "from forgetting import QSSClassifier",
        "from forgetting import QSSRegressor, Receipt, ModelFileError",
        "from forgetting.estimators import QSSClassifier",
        "from forgetting.store.durable import DurableModel",
    ],
)
def test_importing_the_library_loads_no_pandas_torch_or_matplotlib(statement):
    code, modules, _ = loaded_by(statement)
    assert code == 0
    assert among(modules, NEVER_ON_IMPORT) == []


def test_import_forgetting_alone_loads_nothing_heavy():
    code, modules, _ = loaded_by("import forgetting")
    assert code == 0 and among(modules, HEAVY) == []


def test_a_dataframe_brings_its_own_pandas():
    """pandas imported after the estimators is the one scikit-learn sees: a DataFrame's column
    names are recorded, and the finder that kept scikit-learn's own import from loading pandas
    is gone."""
    code, _, out = loaded_by(
        "from forgetting import QSSClassifier\n"
        "    import forgetting._sklearn_pandas as shim\n"
        "    assert 'pandas' not in sys.modules\n"
        "    import numpy as np, pandas as pd\n"
        "    rng = np.random.default_rng(0)\n"
        "    X = pd.DataFrame(rng.normal(size=(120, 3)), columns=['a', 'b', 'c'])\n"
        "    model = QSSClassifier(n_instances=1).fit(X, (X['a'] > 0).astype(int))\n"
        "    print(list(model.feature_names_in_), shim._FINDER in sys.meta_path)"
    )
    assert code == 0 and out.split() == ["['a',", "'b',", "'c']", "False"]


def test_pandas_imported_first_is_left_alone():
    code, _, out = loaded_by(
        "import pandas\n"
        "    from forgetting import QSSClassifier\n"
        "    import sklearn.utils.fixes as fixes, forgetting._sklearn_pandas as shim\n"
        "    print(fixes.pd is pandas, shim._FINDER in sys.meta_path)"
    )
    assert code == 0 and out.split() == ["True", "False"]


def test_only_the_eager_import_is_declined():
    """Any other import of pandas goes through, even while the finder is installed."""
    code, modules, _ = loaded_by(
        "import forgetting._sklearn_pandas as shim\n"
        "    shim.install()\n"
        "    assert shim._FINDER in sys.meta_path\n"
        "    import pandas"
    )
    assert code == 0 and "pandas" in modules


# -- the command line -------------------------------------------------------------------------


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [name for name in sub.choices if name != "bench"]


@pytest.mark.parametrize("command", [None, *_commands()])
@pytest.mark.parametrize("entry", ["python -m forgetting", "forgetting"])
def test_help_imports_nothing_heavy(entry, command):
    argv = ["forgetting", *([command] if command else []), "--help"]
    if entry == "python -m forgetting":
        run = "runpy.run_module('forgetting', run_name='__main__')"
        body = f"import runpy; sys.argv = {argv!r}; {run}"
    else:  # the console script: forgetting.cli:main
        body = f"from forgetting.cli import main; sys.exit(main({argv[1:]!r}))"
    code, modules, out = loaded_by(body)
    assert code == 0 and "usage: forgetting" in out
    assert among(modules, HEAVY + PLUGINS) == []


def test_help_defaults_are_the_estimators_own():
    """fit --help shows DEFAULTS without importing the estimators: it must equal their
    get_params(), or a default changed there would be misreported here."""
    from forgetting import QSSClassifier, QSSRegressor

    for task, estimator in (("classification", QSSClassifier), ("regression", QSSRegressor)):
        params = estimator().get_params()
        assert DEFAULTS[task] == {name: params[name] for name in ESTIMATOR_OPTIONS}, task
    from forgetting import ExactForestClassifier, ExactForestRegressor

    for forest in (ExactForestClassifier, ExactForestRegressor):
        params = forest().get_params()
        assert FOREST_DEFAULTS == {name: params[name] for name in FOREST_DEFAULTS}, forest
        assert set(FOREST_DEFAULTS) == set(options_of("forest"))
