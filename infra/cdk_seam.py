"""The seam between the stacks and the CDK: which CDK their imports load.

cdktf was archived by its vendor in December 2025; CDK Terrain is its
maintained fork with the same API under other module names (``cdktn``,
``cdktn_provider_aws``). With ``TABLECAST_CDK=cdktn`` in the environment,
importing ``infra`` installs an import hook that makes every ``cdktf`` and
``cdktf_cdktf_provider_aws`` import resolve to CDK Terrain's modules, so the
same stacks synthesize on it unchanged. This module imports no CDK itself:
``infra.config`` stays light (the pipeline on one machine reads it).
"""

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType

CDK_VARIABLE = "TABLECAST_CDK"
DEFAULT_CDK = "cdktf"
# Module renames per CDK: what the stacks import -> what is loaded.
RENAMES: dict[str, dict[str, str]] = {
    "cdktf": {},
    "cdktn": {"cdktf": "cdktn", "cdktf_cdktf_provider_aws": "cdktn_provider_aws"},
}


class _Renamed(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``old`` and ``old.x.y`` as the already-importable ``new`` and ``new.x.y``."""

    def __init__(self, renames: dict[str, str]) -> None:
        self._renames = renames
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def _target(self, fullname: str) -> str | None:
        for old, new in self._renames.items():
            if fullname == old or fullname.startswith(f"{old}."):
                return new + fullname[len(old) :]
        return None

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if self._target(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        target = self._target(spec.name)
        assert target is not None
        module = importlib.import_module(target)
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the alias's spec; it stays itself.
        module.__spec__ = self._specs.get(module.__name__, module.__spec__)


def selected(environ: dict[str, str] | None = None) -> str:
    """The CDK chosen by ``$TABLECAST_CDK``: ``cdktf`` (default) or ``cdktn``."""
    name = (environ if environ is not None else dict(os.environ)).get(CDK_VARIABLE, DEFAULT_CDK)
    if name not in RENAMES:
        sys.exit(f"infra: {CDK_VARIABLE}={name!r} is not one of {', '.join(RENAMES)}")
    return name


CDK = selected()
if RENAMES[CDK] and not any(isinstance(finder, _Renamed) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Renamed(RENAMES[CDK]))
