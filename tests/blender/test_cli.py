"""``./neural-ik``: the launcher runs the same parser as ``blender -c neural_ik``."""

import os
import re

import torch


def _field(stdout, key):
    match = re.search(r"^{}\s+(.*)$".format(re.escape(key)), stdout, re.MULTILINE)
    assert match, "no {!r} line in:\n{}".format(key, stdout)
    return match.group(1).strip()


def test_help(run_cli):
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: neural-ik")
    assert "info" in result.stdout


def test_subcommand_help(run_cli):
    result = run_cli("info", "--help")
    assert result.returncode == 0, result.stderr
    assert "--device" in result.stdout and "--weights" in result.stdout


def test_unknown_subcommand_exits_2_with_usage_on_stderr(run_cli):
    result = run_cli("bogus")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: neural-ik")
    assert "invalid choice: 'bogus'" in result.stderr
    assert result.stdout == ""


def test_missing_subcommand_is_a_usage_error(run_cli):
    result = run_cli()
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_bad_flag_value_is_a_usage_error(run_cli):
    result = run_cli("info", "--device", "tpu")
    assert result.returncode == 2
    assert "invalid choice: 'tpu'" in result.stderr


def test_info_versions_and_device(run_cli):
    import bpy
    import numpy

    result = run_cli("info", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert _field(result.stdout, "blender") == bpy.app.version_string
    assert _field(result.stdout, "torch") == torch.__version__
    assert _field(result.stdout, "numpy") == numpy.__version__
    assert _field(result.stdout, "python").startswith("3.11")
    assert _field(result.stdout, "device setting") == "cpu"
    assert _field(result.stdout, "device in use") == "cpu"
    assert "Traceback" not in result.stderr


def test_info_default_weights_path(run_cli, repo_root):
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    path = repo_root / "weights" / "neural_ik.pt"
    assert _field(result.stdout, "weights") == str(path)
    status = _field(result.stdout, "weights status")
    assert status == ("ok" if path.is_file() else "missing") or status.startswith("corrupt: ")


def test_info_missing_weights(run_cli, tmp_path):
    result = run_cli("info", "--weights", tmp_path / "nope.pt")
    assert result.returncode == 0
    assert _field(result.stdout, "weights status") == "missing"
    assert "Traceback" not in result.stdout + result.stderr


def test_info_corrupt_weights(run_cli, tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    good = tmp_path / "good.pt"
    torch.save({"w": torch.zeros(3)}, good)
    data = good.read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])

    for path in (garbage, truncated):
        result = run_cli("info", "--weights", path)
        assert result.returncode == 0
        assert _field(result.stdout, "weights status").startswith("corrupt: "), result.stdout
        assert "Traceback" not in result.stdout + result.stderr
        assert _field(result.stdout, "weights size") == "{} bytes".format(os.path.getsize(path))


def test_info_old_weights_format(run_cli, tmp_path):
    old = tmp_path / "old.pt"
    torch.save({"format": "neural_ik", "format_version": 1, "state": {}}, old)
    result = run_cli("info", "--weights", old)
    assert result.returncode == 0, result.stderr
    status = _field(result.stdout, "weights status")
    assert status.startswith("unusable: ") and "re-train" in status and "download" in status, status
    assert "Traceback" not in result.stdout + result.stderr
    result = run_cli("demo", "--weights", old, "--out", tmp_path / "demo")
    assert result.returncode != 0 and "re-train" in result.stderr and "Traceback" not in result.stderr


def test_info_good_weights_checksum(run_cli, tmp_path):
    import hashlib

    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(4)}, good)
    result = run_cli("info", "--weights", good)
    assert result.returncode == 0, result.stderr
    assert _field(result.stdout, "weights status") == "ok"
    assert _field(result.stdout, "weights sha256") == hashlib.sha256(good.read_bytes()).hexdigest()


def test_launcher_loads_repo_as_package_named_neural_ik(repo_root):
    """The launcher works whatever the clone's folder is called."""
    import subprocess
    import sys

    code = (
        "import sys; sys.argv=['neural-ik', '--help'];"
        "import runpy; runpy.run_path({!r}, run_name='__main__')".format(str(repo_root / "cli" / "standalone.py"))
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr


def test_same_parser_in_blender_and_launcher(ext):
    import importlib

    parser_module = importlib.import_module(ext.__name__ + ".cli.parser")
    blender = parser_module.build_parser(parser_module.PROG_BLENDER)
    launcher = parser_module.build_parser(parser_module.PROG_STANDALONE)
    sub_b = blender._subparsers._group_actions[0].choices
    sub_l = launcher._subparsers._group_actions[0].choices
    assert sorted(sub_b) == sorted(sub_l) == sorted(parser_module.SUBCOMMANDS)
    for name in sub_b:
        flags_b = sorted(opt for action in sub_b[name]._actions for opt in action.option_strings)
        flags_l = sorted(opt for action in sub_l[name]._actions for opt in action.option_strings)
        assert flags_b == flags_l


def test_ci_run_fails_on_failed_or_no_tests(repo_root, tmp_path):
    """.ci/run: the whole suite on bpy 5.0.1, the LTS subset on 4.2 and 4.5; any failure or "no tests
    collected" (pytest exit code 5) fails the job, and every version still runs."""
    import shutil
    import subprocess

    (tmp_path / ".ci").mkdir()
    for name in ("run", "pytest"):
        shutil.copy(repo_root / ".ci" / name, tmp_path / ".ci" / name)
    (tmp_path / "setup.sh").write_text('#!/bin/sh\necho "$@" > "$FAKE_LOG.setup"\nexit 0\n')
    fakes = {".venv": "50", ".venv-4.2": "42", ".venv-4.5": "45"}
    for venv, tag in fakes.items():
        (tmp_path / venv / "bin").mkdir(parents=True)
        (tmp_path / venv / "bin" / "python").write_text(
            '#!/bin/sh\nshift 2  # -c CODE\necho "{} $NEURAL_IK_VENV $*" >> "$FAKE_LOG"\n'
            'exit "${{FAKE_{}:-$FAKE_PYTEST_STATUS}}"\n'.format(venv, tag))
        (tmp_path / venv / "bin" / "python").chmod(0o755)
    for f in (".ci/run", ".ci/pytest", "setup.sh"):
        (tmp_path / f).chmod(0o755)
    log = tmp_path / "log"
    for status, per_version, want in ((0, {}, 0), (1, {}, 1), (2, {}, 2), (5, {}, 1), (0, {"42": "1"}, 1),
                                      (0, {"45": "5"}, 1), (0, {"50": "3"}, 3)):
        log.write_text("")
        env = dict(os.environ, FAKE_PYTEST_STATUS=str(status), FAKE_LOG=str(log),
                   **{"FAKE_" + k: v for k, v in per_version.items()})
        r = subprocess.run([str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == want, (status, per_version, r.stdout, r.stderr)
        if 5 in (status, *map(int, per_version.values())):
            assert "no tests" in r.stderr
        runs = log.read_text().splitlines()
        assert [line.split()[0] for line in runs] == [".venv", ".venv-4.2", ".venv-4.5"], runs
        assert all(line.split()[1] == str(tmp_path / line.split()[0]) for line in runs), runs
        assert "tests/blender/test_bake.py" in runs[1] and "tests/blender/test_operators.py" in runs[2]
    assert "--lts" in (tmp_path / "log.setup").read_text()
