"""Every public name of Powertools' idempotency package exists here at the same relative path.

The reference is the Powertools release installed as a dev dependency, read at test time: when
Powertools adds a name, this fails until the name exists here too.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
from typing import Any

import pytest

import idempotent_lambda
from idempotent_lambda import exceptions

powertools = pytest.importorskip("aws_lambda_powertools.utilities.idempotency")
PREFIX = powertools.__name__


def _powertools_modules() -> list[str]:
    found = pkgutil.walk_packages(powertools.__path__, PREFIX + ".")
    return ["", *sorted(info.name.removeprefix(PREFIX) for info in found)]


def _public_names(module: types.ModuleType) -> set[str]:
    """Names a user can import from ``module``: things the idempotency package defines.

    Imports from elsewhere (``typing.Any``, ``logging`` loggers, other Powertools utilities) are
    not part of the idempotency API; constants (UPPER_CASE values that are not classes) and
    everything whose ``__module__`` is inside the package are.
    """
    names = set()
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        defined_in = getattr(value, "__module__", None) or ""
        constant = name.isupper() and not isinstance(value, type) and name != "TYPE_CHECKING"
        if defined_in.startswith(PREFIX) or constant:
            names.add(name)
    return names


@pytest.mark.parametrize("relative", _powertools_modules())
def test_module_has_every_public_name(relative: str) -> None:
    """Our module at Powertools' relative path has every public name of theirs."""
    try:
        theirs = importlib.import_module(PREFIX + relative)
    except ImportError as exc:  # an optional extra of theirs (redis) is not installed
        pytest.skip(f"Powertools' {relative} cannot be imported here: {exc}")
    ours = importlib.import_module("idempotent_lambda" + relative)

    missing = {name for name in _public_names(theirs) if not hasattr(ours, name)}

    assert set() == missing


def test_the_reference_is_not_empty() -> None:
    """The comparison above looks at the modules and names that matter (it can fail)."""
    modules = _powertools_modules()
    top = _public_names(importlib.import_module(PREFIX))

    assert {".exceptions", ".persistence.base", ".serialization.pydantic", ".hook"} <= set(modules)
    assert {"idempotent", "idempotent_function", "BasePersistenceLayer"} <= top


def _powertools_errors() -> list[str]:
    module = importlib.import_module(PREFIX + ".exceptions")
    return sorted(
        name
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, Exception)
    )


@pytest.mark.parametrize("name", _powertools_errors())
def test_every_powertools_error_is_one_of_ours(name: str) -> None:
    """Each Powertools exception name is an `IdempotencyError`, so ``except BaseError`` works."""
    error: Any = getattr(exceptions, name)

    assert issubclass(error, exceptions.BaseError)
    assert issubclass(error, idempotent_lambda.IdempotencyError)


@pytest.mark.parametrize(
    ("name", "parent"),
    [
        ("IdempotencyPersistenceConnectionError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyPersistenceConsistencyError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyPersistenceConfigError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyPersistenceConfigError", "IdempotencyConfigError"),
        ("IdempotencyInconsistentStateError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyInvalidStatusError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyItemAlreadyExistsError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyItemNotFoundError", "IdempotencyPersistenceLayerError"),
        ("IdempotencyModelTypeError", "IdempotencyConfigError"),
        ("IdempotencyNoSerializationModelError", "IdempotencyConfigError"),
    ],
)
def test_new_errors_sit_under_the_error_they_refine(name: str, parent: str) -> None:
    """An ``except`` on our broader error also catches the Powertools-named one."""
    assert issubclass(getattr(exceptions, name), getattr(exceptions, parent))


def test_item_already_exists_carries_the_old_record() -> None:
    """``old_data_record`` is kept, as stores written for Powertools pass it."""
    from idempotent_lambda.persistence.datarecord import DataRecord

    old = DataRecord("k", status="COMPLETED")

    error = exceptions.IdempotencyItemAlreadyExistsError("exists", old_data_record=old)

    assert old is error.old_data_record
    assert "exists" == str(error)


def test_old_serialization_imports_still_work() -> None:
    """``idempotent_lambda.serialization`` (a module before, a package now) keeps its names."""
    from idempotent_lambda.serialization import (
        BaseIdempotencySerializer,
        DataclassSerializer,
        NoOpSerializer,
        PydanticSerializer,
        resolve_serializer,
    )
    from idempotent_lambda.serialization.dataclass import DataclassSerializer as AtPath
    from idempotent_lambda.serialization.no_op import NoOpSerializer as NoOpAtPath

    assert (DataclassSerializer, NoOpSerializer) == (AtPath, NoOpAtPath)
    assert isinstance(NoOpSerializer(), BaseIdempotencySerializer)
    assert callable(resolve_serializer)
    assert PydanticSerializer.__module__.endswith(".serialization.pydantic")


def test_compatibility_modules_import_no_boto3() -> None:
    """The serialization, hook and datarecord paths import without boto3 (checked in a child)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import idempotent_lambda.serialization.pydantic, idempotent_lambda.hook\n"
        "import idempotent_lambda.persistence.datarecord, idempotent_lambda.exceptions\n"
        "from idempotent_lambda import BasePersistenceLayer, IdempotentHookFunction\n"
        "print(sorted(m for m in ('boto3', 'botocore', 'pydantic') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )

    assert "[]" == out.stdout.strip()
