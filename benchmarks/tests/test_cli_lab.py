"""``forgetting bench`` and ``forgetting audit``: the commands that run the lab's modules. The
registered benchmarks the installation has are offered (the lab's ``paper``, its duration read
from the module), the chosen module alone is imported, and a missing dependency is one line."""

from __future__ import annotations

import sys

import pytest

from forgetting import cli as cli_module
from forgetting.cli import main


def run(capsys, *argv):
    """(exit code, stdout, stderr) of ``forgetting *argv`` (as in tests/cli/test_cli.py)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _one_error_line(err):
    """The one line saying what went wrong (as in tests/cli/test_cli.py)."""
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    assert "Traceback" not in err, err
    return errors[0]


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Benchmark and audit modules in a temporary folder on the packages' paths: one that
    works, one whose dependency is missing; plus a name listed but absent."""
    (tmp_path / "fakebench.py").write_text(
        '"""A fake benchmark for the CLI tests."""\n'
        "CALLS = []\n"
        "def main(argv=None):\n"
        "    CALLS.append(argv)\n"
        "    return 3\n"
    )
    (tmp_path / "brokenbench.py").write_text(
        '"""Needs a package that is not installed."""\nimport not_installed_pkg_xyz\n'
    )
    (tmp_path / "fake_command.py").write_text(
        '"""A fake audit for the CLI tests."""\n'
        "def configure(parser):\n"
        "    parser.add_argument('--n', type=int, required=True, help='the exit code')\n"
        "def run(args):\n"
        "    return args.n\n"
    )
    (tmp_path / "broken_command.py").write_text(
        '"""A broken audit."""\nimport not_installed_pkg_xyz\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        cli_module,
        "BENCHMARKS",
        {
            "paper": "forgetting_lab.bench.paper",
            **{name: name for name in ("fakebench", "brokenbench", "absentbench")},
        },
    )
    monkeypatch.setattr(
        cli_module,
        "AUDITS",
        {name: f"{name}_command" for name in ("fake", "broken", "absent")},
    )
    yield
    for name in ("fakebench", "brokenbench", "fake_command", "broken_command"):
        sys.modules.pop(name, None)


def test_bench_runs_the_named_module_and_offers_only_existing_ones(capsys, plugins):
    code, _, _ = run(capsys, "bench", "fakebench", "--n", "5")
    assert code == 3 and sys.modules["fakebench"].CALLS == [["--n", "5"]]
    code, _, err = run(capsys, "bench", "absentbench")
    assert code == 2 and "not available" in _one_error_line(err)
    code, _, err = run(capsys, "bench", "nonsense")
    assert code == 2 and "fakebench" in _one_error_line(err)
    code, _, err = run(capsys, "bench", "brokenbench")
    assert code == 1 and "pip install not_installed_pkg_xyz" in _one_error_line(err)
    assert cli_module.available_benchmarks() == ["paper", "fakebench", "brokenbench"]
    for argv in (["bench"], ["bench", "--help"]):  # a menu with durations; nothing runs
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "A fake benchmark for the CLI tests." in out
        assert "absentbench" not in out and "paper" in out
        assert "takes: 33-60 min" in out and sys.modules["fakebench"].CALLS == [["--n", "5"]]
    code, _, err = run(capsys, "bench", "--datasets", "digits")
    assert code == 2 and "name a benchmark" in _one_error_line(err)


def test_audit_configures_and_runs_only_the_chosen_module(capsys, plugins):
    code, _, err = run(capsys, "audit", "fake", "--n", "4")
    assert code == 4, err
    assert "broken_command" not in sys.modules
    code, _, err = run(capsys, "audit", "broken")
    assert code == 1 and "pip install not_installed_pkg_xyz" in _one_error_line(err)
    with pytest.raises(SystemExit) as stop:
        main(["audit", "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "A fake audit for the CLI tests." in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ")]
    assert listed == ["fake", "broken"]
    with pytest.raises(SystemExit):
        main(["audit", "fake", "--help"])
    assert "the exit code" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "fakebench" in capsys.readouterr().out
