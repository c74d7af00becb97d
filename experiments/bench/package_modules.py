"""The pure-Python modules of the package jacond (python/jacond/), for the bench scripts.

`import jacond` would need the compiled extension, which a bench run does not build; the modules
below import nothing package-relative, so they are loaded by file path instead.
"""

import importlib.util
import os
import sys

PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "jacond")


def load(name):
    """python/jacond/<name>.py as the module `jacond_<name>` (imported once)."""
    key = f"jacond_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, os.path.join(PACKAGE, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]
