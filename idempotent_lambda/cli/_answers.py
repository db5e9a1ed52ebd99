"""AWS's answers as `doctor` reads them: every field it uses is checked before a check reads it.

An answer that lacks a field AWS always sends, or holds a field of another type than AWS
documents (a proxy, an emulator, a hand-made endpoint), makes `ask` raise a `CliError` (exit 2)
that names the API, the field and why, instead of a check failing on a `KeyError` or judging the
table on what it cannot read. The fields each API's answer must have are listed here, by API.
"""

from __future__ import annotations

import contextlib
import decimal
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from idempotent_lambda.cli._output import CliError

Kind = tuple[str, Callable[[Any], bool]]
"""What a field must be: its name for the message, and the test of a value."""

STRING: Kind = ("a string", lambda v: isinstance(v, str))
NUMBER: Kind = (
    "a number",
    lambda v: isinstance(v, int | float | decimal.Decimal) and not isinstance(v, bool),
)
BOOLEAN: Kind = ("true or false", lambda v: isinstance(v, bool))
OBJECT: Kind = ("an object", lambda v: isinstance(v, Mapping))
LIST: Kind = ("a list", lambda v: isinstance(v, list))
DOCUMENT: Kind = ("a string or an object", lambda v: isinstance(v, str | Mapping))
STRINGS: Kind = (
    "a string or a list of strings",
    lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(s, str) for s in v)),
)


@dataclass(frozen=True, slots=True)
class Field:
    """A field of an answer, by path: ``Table.KeySchema[].AttributeName`` (``[]``: each item).

    ``required``: the field must be there whenever the object holding it is.
    """

    path: str
    kind: Kind
    required: bool = False


TABLE = (
    Field("Table", OBJECT, required=True),
    Field("Table.TableArn", STRING, required=True),
    Field("Table.KeySchema", LIST, required=True),
    Field("Table.KeySchema[].AttributeName", STRING, required=True),
    Field("Table.KeySchema[].KeyType", STRING, required=True),
    Field("Table.AttributeDefinitions", LIST, required=True),
    Field("Table.AttributeDefinitions[].AttributeName", STRING, required=True),
    Field("Table.AttributeDefinitions[].AttributeType", STRING, required=True),
    Field("Table.BillingModeSummary.BillingMode", STRING),
    Field("Table.ProvisionedThroughput.ReadCapacityUnits", NUMBER),
    Field("Table.ProvisionedThroughput.WriteCapacityUnits", NUMBER),
    Field("Table.Replicas[].RegionName", STRING, required=True),
    Field("Table.MultiRegionConsistency", STRING),
    Field("Table.DeletionProtectionEnabled", BOOLEAN),
)
TIME_TO_LIVE = (
    Field("TimeToLiveDescription.TimeToLiveStatus", STRING),
    Field("TimeToLiveDescription.AttributeName", STRING),
)
BACKUPS = (
    Field(
        "ContinuousBackupsDescription.PointInTimeRecoveryDescription.PointInTimeRecoveryStatus",
        STRING,
    ),
)
SCALABLE_TARGETS = (
    Field("ScalableTargets", LIST, required=True),
    Field("ScalableTargets[].ScalableDimension", STRING, required=True),
)
FUNCTION = (Field("Role", STRING, required=True),)
ROLE_POLICIES = (Field("PolicyNames", LIST, required=True), Field("PolicyNames[]", STRING))
ROLE_POLICY = (Field("PolicyDocument", DOCUMENT, required=True),)
ATTACHED_POLICIES = (
    Field("AttachedPolicies", LIST, required=True),
    Field("AttachedPolicies[].PolicyArn", STRING, required=True),
)
POLICY = (Field("Policy.DefaultVersionId", STRING, required=True),)
POLICY_VERSION = (Field("PolicyVersion.Document", DOCUMENT, required=True),)
#: A policy document, its ``Statement`` made a list first.
STATEMENTS = (
    Field("Statement[].Effect", STRING),
    Field("Statement[].Action", STRINGS),
    Field("Statement[].Resource", STRINGS),
)


def ask(client: Any, method: str, fields: Sequence[Field], **params: Any) -> Any:
    """Return the answer to ``client.<method>(**params)`` once ``fields`` are usable in it.

    Raises:
        CliError: A field is missing or of another type, or botocore could not parse the
            answer at all; the message names the API, and the field where it can be told.
    """
    api = client.meta.method_to_api_mapping.get(method, method)
    bodies: list[bytes] = []

    def keep(response_dict: Mapping[str, Any], **_: Any) -> None:
        bodies.append(response_dict["body"])

    client.meta.events.register("before-parse", keep, unique_id="idempotent-lambda-doctor")
    try:
        answer = getattr(client, method)(**params)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # botocore's parser broke
        with contextlib.suppress(ValueError, IndexError):  # on JSON, the raw answer names the field
            check(api, json.loads(bodies[-1]), fields)
        raise CliError(
            f"{api}'s answer is unusable: it does not have the shape AWS documents "
            f"(botocore: {type(exc).__name__}: {exc})"
        ) from exc
    finally:
        client.meta.events.unregister("before-parse", unique_id="idempotent-lambda-doctor")
    check(api, answer, fields)
    return answer


def check(api: str, answer: Any, fields: Sequence[Field]) -> None:
    """Raise `CliError` naming ``api``, the field and why, for the first unusable field."""
    for field in fields:
        try:
            for where, value in _found(answer, field.path.split("."), ""):
                if value is None and field.required:
                    raise _UnusableFieldError(where, "is missing")
                if value is not None and not field.kind[1](value):
                    raise _UnusableFieldError(where, f"is {_what(value)}, not {field.kind[0]}")
        except _UnusableFieldError as exc:
            raise CliError(f"{api}'s answer is unusable: {exc.where} {exc.why}") from None


class _UnusableFieldError(Exception):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(where, why)
        self.where, self.why = where, why


def _found(value: Any, parts: list[str], where: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(path, value)`` for each value at ``parts``; None for an absent one.

    Nothing is yielded below an absent object: whether it must be there is its own field's
    business.
    """
    if not parts:
        yield where, value
        return
    part, *rest = parts
    name, each = part.removesuffix("[]"), part.endswith("[]")
    if not isinstance(value, Mapping):
        raise _UnusableFieldError(where or "the answer", f"is {_what(value)}, not an object")
    here = f"{where}.{name}" if where else name
    found = value.get(name)
    if found is None:
        if not rest:
            yield here, None
    elif not each:
        yield from _found(found, rest, here)
    elif not isinstance(found, list):
        raise _UnusableFieldError(here, f"is {_what(found)}, not a list")
    else:
        for index, item in enumerate(found):
            yield from _found(item, rest, f"{here}[{index}]")


def _what(value: Any) -> str:
    """Name the JSON type of ``value`` (never the value: it may hold anything)."""
    if isinstance(value, bool):
        return "true or false"
    for kind in (STRING, NUMBER, OBJECT, LIST):
        if kind[1](value):
            return kind[0]
    return f"a {type(value).__name__}"
