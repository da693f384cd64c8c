"""Entry point of ``./neural-ik``: the same parser, run through the PyPI ``bpy`` module.

The repository root is loaded as the package ``neural_ik`` (the clone's folder
name is arbitrary), so relative imports work as they do inside Blender.
"""

import importlib
import importlib.util
import os
import sys

PACKAGE_NAME = "neural_ik"


def load_package(root=None):
    """Import the repository root as the package ``neural_ik``.

    Parameters
    ----------
    root : str, optional
        Folder holding ``__init__.py`` and ``blender_manifest.toml``;
        defaults to the parent of this ``cli`` folder.

    Returns
    -------
    module
    """
    if PACKAGE_NAME in sys.modules:
        return sys.modules[PACKAGE_NAME]
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        PACKAGE_NAME, os.path.join(root, "__init__.py"), submodule_search_locations=[root],
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[PACKAGE_NAME]
        raise
    return module


def main(argv=None):
    """Run the CLI; returns the exit code."""
    load_package()
    parser = importlib.import_module(PACKAGE_NAME + ".cli.parser")
    return parser.main(sys.argv[1:] if argv is None else argv, prog=parser.PROG_STANDALONE)


if __name__ == "__main__":
    sys.exit(main())
