"""The processor a name names: ``--processor package.module:Class``, or the ledger's record.

``table`` (or no name) is the built-in
:class:`~app.contract.table_processor.TableProcessor` over the job's table
schema. Any other name is a subclass of
:class:`~app.contract.processor.Processor` in a package the job's Python
can import (installed beside tablecast; on the cluster, the wheel
``tablecast-ops deploy`` ships). It is made without arguments and checked
here, so a processor that cannot run is refused in one line before anything
starts: a name that imports nothing, a class that is not a processor, no
output schema, a state the job cannot encode.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from typing import Any

from app.contract.processor import Processor, overrides, state_kind
from app.contract.schema import TableSchema
from app.contract.table_processor import TableProcessor
from app.errors import ConfigurationError, ProcessorError, one_line

BUILT_IN = TableProcessor.name
_NAME = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def load(name: str | None, schema: TableSchema, *, schema_given: bool = False) -> Processor[Any]:
    """The processor ``name`` names, reading messages with ``schema`` where it declares no
    input schema of its own. ``schema_given``: the operator named ``schema`` (``--schema``),
    which a processor with its own input schema refuses unless it is the same."""
    if name is None or name == BUILT_IN:
        return TableProcessor(schema)
    cls = find(name)
    try:
        processor: Processor[Any] = cls()
    except Exception as exc:
        raise ProcessorError(
            f"--processor {name}: {cls.__qualname__}() failed: {type(exc).__name__}: {exc}",
            processor=name,
            step="load",
        ) from exc
    check(name, processor)
    declared = processor.input
    if declared is None:
        processor.input = schema
    elif schema_given and declared.digest != schema.digest:
        raise ConfigurationError(
            f"--processor {name} declares its own input schema ({declared.describe()}); "
            f"--schema names another ({schema.describe()}): leave --schema out"
        )
    return processor


def split(name: str) -> tuple[str, str]:
    """``package.module:Class`` as its module and its class, or the one line saying why not."""
    if not _NAME.match(name):
        raise ConfigurationError(
            f"--processor {name!r} is not like package.module:Class (or 'table', the built-in)"
        )
    module_name, _, class_name = name.partition(":")
    return module_name, class_name


def find(name: str) -> type[Processor[Any]]:
    """The class ``module:Class`` names, imported."""
    module_name, class_name = split(name)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"--processor {name}: no module named {exc.name!r} (install the processor's "
            "package where tablecast runs)"
        ) from None
    except Exception as exc:
        raise ProcessorError(
            f"--processor {name}: importing {module_name} failed: {type(exc).__name__}: {exc}",
            processor=name,
            step="load",
        ) from exc
    found: Any = module
    for part in class_name.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise ConfigurationError(f"--processor {name}: {module_name} has no {class_name}")
    if not (isinstance(found, type) and issubclass(found, Processor)):
        raise ConfigurationError(
            f"--processor {name}: {class_name} is not a subclass of tablecast.Processor"
        )
    return found


def check(name: str, processor: Processor[Any]) -> None:
    """Refuse a processor the job cannot run, naming what it lacks."""
    output = getattr(processor, "output", None)
    if not isinstance(output, TableSchema):
        raise ConfigurationError(
            f"--processor {name}: declares no output schema (output = tablecast.schema(...))"
        )
    if processor.input is not None and not isinstance(processor.input, TableSchema):
        raise ConfigurationError(
            f"--processor {name}: input must be a table schema (tablecast.schema(...)) or None"
        )
    version = processor.state_version
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigurationError(
            f"--processor {name}: state_version must be a whole number from 1, not {version!r}"
        )
    if not overrides(processor, "apply"):
        raise ConfigurationError(f"--processor {name}: writes no apply()")
    # The ledger names the processor that wrote each range by it: replay, correct and
    # verify load the processor it names.
    if not isinstance(processor.name, str) or not processor.name.strip():
        raise ConfigurationError(
            f"--processor {name}: its name {processor.name!r} names nothing (leave name out: "
            "module:Class)"
        )
    if processor.name == BUILT_IN:
        raise ConfigurationError(
            f"--processor {name}: its name {processor.name!r} is the built-in's; the ledger "
            "names the processor that wrote each range by it (leave name out: module:Class)"
        )
    _check_shippable(name, processor)
    if overrides(processor, "encode_state") and overrides(processor, "decode_state"):
        return
    problem = state_kind(processor.state_type)
    if problem is not None:
        raise ConfigurationError(
            f"--processor {name}: its state {problem} (subclass Processor[State] with one, "
            "or write encode_state and decode_state)"
        )
    try:
        made = processor.state_type()
    except TypeError:
        return  # a state type without defaults: made by start() only
    try:
        processor.decode_state(processor.encode_state(made))
    except Exception as exc:  # msgspec cannot encode one of its fields
        raise ConfigurationError(
            f"--processor {name}: its state {processor.state_type.__qualname__} cannot be "
            f"encoded: {exc}"
        ) from None


def _check_shippable(name: str, processor: Processor[Any]) -> None:
    """Refuse a processor Spark cannot send to its workers (it pickles it into every
    micro-batch's task): one that holds a lock, a connection, an open file, ..."""
    # The pickler Spark's tasks are sent with: it takes what the standard one does not (a
    # lambda, a class defined in a function).
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(processor)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ConfigurationError(
            f"--processor {name}: Spark cannot send it to its workers: "
            f"{one_line(exc)} (hold only what pickles; make "
            "the rest where it is first used, in start() or apply())"
        ) from None


def distribution_version(processor: Processor[Any]) -> str:
    """The version of the installed distribution that holds the processor's module ("" if
    none: a module on the path, or the built-in's)."""
    if processor.name == BUILT_IN:
        return ""
    top = type(processor).__module__.partition(".")[0]
    for distribution in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""
