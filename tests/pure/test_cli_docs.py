"""docs/cli.md is generated from the argparse parser (tools/gen_cli_docs.py) and must match it."""

import importlib.util
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", REPO / "tools" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_parser():
    gen = _generator()
    current = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == gen.render(), (
        "docs/cli.md differs from the parser: run `.venv/bin/python tools/gen_cli_docs.py` and commit it")


def test_cli_reference_lists_every_subcommand():
    gen = _generator()
    text = gen.render()
    parser_module = __import__("neural_ik.cli.parser", fromlist=["SUBCOMMANDS"])
    for name in parser_module.SUBCOMMANDS:
        assert "## `neural-ik {}`".format(name) in text
    assert "--max-frames" in text and "--precision" in text
