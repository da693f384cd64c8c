"""``batch --scheduler`` says how to install Dask with the pins of requirements.txt."""

import re
from pathlib import Path

from neural_ik.cli import cluster

REPO = Path(__file__).resolve().parents[2]


def test_install_hint_has_the_pins_of_requirements_txt():
    pins = dict(line.split("==") for line in (REPO / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    hinted = dict(re.findall(r"\b(dask|distributed)==([\w.]+)", cluster.INSTALL_HINT))
    assert hinted == {"dask": pins["dask"], "distributed": pins["distributed"]}
