"""The old import paths of the modules that moved into layer packages (docs/ARCHITECTURE.md).

``import bus.codec`` or ``from bus.wire import NeedData`` still works: a finder answers each old
dotted name with the module at its new path, the same module object, and a
:class:`DeprecationWarning` that names the new path. It is first in ``sys.meta_path`` (one dict
lookup per module imported the first time), so that an old name is not taken for a folder of
the same name (``gateway/sdk/``, the served JavaScript client, beside the old ``gateway/sdk.py``).
No file is put back at the old place. ``bus.frame`` and ``bus.message`` were modules and are now
packages: their old attributes (``from bus.message import Message``) are served by
:func:`moved_attribute` from the package's ``__getattr__``.

This module is not a protocol module (docs/PROTOCOL.md describes no import path); it imports
nothing of busgate, so every package can register its table here (``gateway`` does).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import FrameType, ModuleType

#: bus's old dotted names -> their new ones (issue 36: bus/ grouped into layer packages).
BUS_MOVED: dict[str, str] = {
    f"bus.{name}": f"bus.{package}.{name}"
    for package, names in {
        "frame": [
            "frame_decoder", "frame_encoder", "scalars", "typed", "field", "codec", "jsonmap",
            "jsontyped", "jsonlocate", "enums",
        ],
        "message": [
            "message_fields", "message_binary", "message_encode", "header", "jsonwire", "ids",
            "trace",
        ],
        "link": ["wire", "connection", "auth", "tls", "backoff", "receipts", "bus_url"],
        "discovery": [
            "services", "directory_json", "schemas", "names", "topics", "nats_subjects",
        ],
    }.items()
    for name in names
}  # fmt: skip

#: The old modules whose name is now their package's: ``bus.frame`` (the module) is
#: ``bus.frame.frame``; their attributes are looked up there (:func:`moved_attribute`).
BUS_MOVED_INTO_PACKAGE: dict[str, str] = {
    "bus.frame": "bus.frame.frame",
    "bus.message": "bus.message.message",
}

_INTERNALS = ("<frozen importlib", str(importlib.__file__).rpartition("/")[0], __file__)


def _internal(frame: FrameType) -> bool:
    """The import system, this module, or a package's ``__getattr__`` that calls it."""
    code = frame.f_code
    return code.co_filename.startswith(_INTERNALS) or (
        code.co_name == "__getattr__" and code.co_filename.endswith("__init__.py")
    )


def _caller_level() -> int:
    """The ``stacklevel`` that points a warning at the line that used the old name. (``warnings``
    itself skips the import system's ``_bootstrap`` frames when it counts.)"""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and _internal(frame):
        frame = frame.f_back
        name = frame.f_code.co_filename if frame is not None else ""
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
    return level


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}: import it from there (the old path will be removed)",
        DeprecationWarning,
        stacklevel=_caller_level(),
    )


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new path (imported first, if it is not yet)."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        _warn(spec.name, self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the alias's spec on the module it was given: put its own back,
        # so that the module still names its real place (reload, pickle, importlib.resources).
        module.__spec__ = self._spec


class MovedModules(importlib.abc.MetaPathFinder):
    """Old dotted names -> new ones (nothing else: ``None`` lets the next finder look)."""

    def __init__(self) -> None:
        self.moved: dict[str, str] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def _finder() -> MovedModules:
    for finder in sys.meta_path:
        if isinstance(finder, MovedModules):
            return finder
    finder = MovedModules()
    sys.meta_path.insert(0, finder)
    return finder


def register(moved: Mapping[str, str]) -> None:
    """Answer each old dotted name of ``moved`` with the module at its new name."""
    _finder().moved.update(moved)


def moved_attribute(package: str, name: str) -> object:
    """For a package's ``__getattr__``: what ``package.name`` was before the move, with a
    :class:`DeprecationWarning` naming where it is now: a module that moved out of the package
    (``bus.codec``), or a name of the module that the package replaced (``bus.message.Message``
    is ``bus.message.message.Message``, :data:`BUS_MOVED_INTO_PACKAGE`).

    Raises:
        AttributeError: ``name`` is neither (for a submodule's name the import system then
            imports the submodule).
    """
    old = f"{package}.{name}"
    if old in _finder().moved:
        return importlib.import_module(old)
    module_name = BUS_MOVED_INTO_PACKAGE.get(package)
    if module_name is not None and not name.startswith("__"):
        if importlib.util.find_spec(old) is None:
            module = importlib.import_module(module_name)
            if hasattr(module, name):
                warnings.warn(
                    f"{old} moved to {module_name}.{name}: import it from {module_name} "
                    "(the old path will be removed)",
                    DeprecationWarning,
                    stacklevel=_caller_level(),
                )
                return getattr(module, name)
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
