"""Runtime dependencies (deps.py): pins, the install commands per platform, torch's state without importing it."""

import sys
from pathlib import Path

import pytest

from neural_ik import deps

REPO = Path(__file__).resolve().parents[2]


def test_pins_match_requirements_txt():
    pins = dict(line.split("==") for line in (REPO / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name, version in deps.RUNTIME_REQUIREMENTS.items():
        assert pins[name] == version, name


@pytest.mark.parametrize("system,machine,cuda", [
    ("Linux", "x86_64", True), ("Windows", "AMD64", True), ("Darwin", "arm64", False),
    ("Darwin", "x86_64", False), ("Linux", "aarch64", False)])
def test_cuda_builds_only_where_pytorch_publishes_them(system, machine, cuda):
    assert deps.cuda_wheels_available(system, machine) is cuda


def _flags(cmd):
    return {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--") and "=" not in cmd[i]}


def test_install_commands_torch_and_scipy_pinned():
    torch_cmd, scipy_cmd = deps.pip_install_commands("/t", "CPU", names=["torch", "scipy"], numpy_version="1.26.4",
                                                     system="Linux")
    assert torch_cmd[:4] == [sys.executable, "-m", "pip", "install"] and _flags(torch_cmd)["--target"] == "/t"
    assert "torch==2.13.0" in torch_cmd and _flags(torch_cmd)["--index-url"] == deps.TORCH_CPU_INDEX
    # SciPy from PyPI, never a numpy other than Blender's own
    assert "scipy==" + deps.RUNTIME_REQUIREMENTS["scipy"] in scipy_cmd and "numpy==1.26.4" in scipy_cmd
    assert "--index-url" not in scipy_cmd and "--extra-index-url" not in scipy_cmd


def test_install_commands_per_platform():
    def torch_index(variant, system):
        return _flags(deps.pip_install_commands("/t", variant, names=["torch"], system=system)[0]).get("--index-url")

    assert torch_index("CUDA", "Linux") is None                  # PyPI's Linux wheels are CUDA builds
    assert torch_index("CUDA", "Windows") == deps.TORCH_CUDA_INDEX
    assert torch_index("CPU", "Windows") == deps.TORCH_CPU_INDEX
    assert torch_index("CPU", "Darwin") is None                  # PyPI's macOS wheels are CPU builds
    with pytest.raises(ValueError, match="no CUDA builds"):
        deps.pip_install_commands("/t", "CUDA", names=["torch"], system="Darwin")
    only_scipy = deps.pip_install_commands("/t", "CPU", names=["scipy"], numpy_version="1.26.4")
    assert len(only_scipy) == 1 and not any(a.startswith("torch") for a in only_scipy[0])


def test_torch_state_never_imports(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    state, version = deps.torch_state()
    assert state == "found" and version.startswith(deps.RUNTIME_REQUIREMENTS["torch"])
    assert "torch" not in sys.modules
    assert "loads when a solve needs it" in deps.status_line()
    monkeypatch.setitem(sys.modules, "torch", None)
    assert deps.torch_state() == ("missing", "") and deps.missing()[0] == "torch"
    assert deps.status_line() == "PyTorch is not installed"


def test_broken_import_is_one_line(monkeypatch):
    try:
        deps.note_torch_import(OSError("libtorch_cuda.so: cannot open shared object file: No such file or directory"))
        assert deps.torch_state() == ("broken", "OSError: libtorch_cuda.so: cannot open shared object file: "
                                                "No such file or directory")
        assert deps.status_line().startswith("PyTorch is installed but does not load: OSError: libtorch_cuda.so")
        assert deps.import_torch() is None  # not retried until forgotten (a reinstall)
    finally:
        deps.forget_torch_import()


def test_install_command_of_the_c3d_reader():
    (cmd,) = deps.pip_install_commands("/t", "CPU", names=["c3d"], system="Linux")
    assert "c3d==" + deps.RUNTIME_REQUIREMENTS["c3d"] in cmd and "--no-deps" in cmd
    assert _flags(cmd)["--target"] == "/t" and "--index-url" not in cmd
