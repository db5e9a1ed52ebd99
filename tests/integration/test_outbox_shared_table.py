"""Outbox items on a table Powertools shares: it never reads them, in either key layout."""

from __future__ import annotations

from typing import Any

import pytest

from idempotent_lambda import IdempotencyConfig, idempotent
from idempotent_lambda.cli import main
from idempotent_lambda.outbox import emit
from idempotent_lambda.persistence.dynamodb import DynamoDBPersistenceLayer
from tests.integration._two_libraries import context, pt

LAYOUTS = {
    "simple": {},
    "composite": {"key_attr": "pk", "sort_key_attr": "sk", "static_pk_value": "shared"},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_powertools_on_the_shared_table_replays_and_runs_beside_outbox_items(
    layout: str, make_table: Any, dynamodb_client: Any
) -> None:
    """Both libraries serve one function on one table while ours emits through the outbox."""
    options: dict[str, Any] = LAYOUTS[layout]
    table_keys = {k: v for k, v in options.items() if k in ("key_attr", "sort_key_attr")}
    table = make_table(**table_keys)
    runs: list[str] = []
    emitted: list[str] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["id"])
        if outbox_on:
            emitted.append(emit("OrderCreated", {"order": event["id"]}))
        return {"order": event["id"]}

    ours = idempotent(
        persistence_store=DynamoDBPersistenceLayer(table, boto3_client=dynamodb_client, **options),
        config=IdempotencyConfig(event_key_jmespath="id"),
    )(handler)
    theirs = pt.idempotent(
        persistence_store=pt.DynamoDBPersistenceLayer(
            table, boto3_client=dynamodb_client, **options
        ),
        config=pt.IdempotencyConfig(event_key_jmespath="id"),
    )(handler)

    outbox_on = True
    assert {"order": "a"} == ours({"id": "a"}, context())
    assert {"order": "b"} == ours({"id": "b"}, context())
    outbox_on = False
    assert {"order": "a"} == theirs({"id": "a"}, context())  # replays our record
    assert {"order": "c"} == theirs({"id": "c"}, context())
    assert {"order": "c"} == ours({"id": "c"}, context())  # we replay Powertools' record
    assert {"order": "c"} == theirs({"id": "c"}, context())
    assert ["a", "b", "c"] == runs
    assert 2 == len(emitted)

    items = dynamodb_client.scan(TableName=table, ConsistentRead=True)["Items"]
    key_attr = options.get("sort_key_attr", "id")
    outbox = [i for i in items if "#outbox#" in i[key_attr]["S"]]
    assert sorted(emitted) == sorted(i["outbox_id"]["S"] for i in outbox)
    assert all("status" not in i for i in outbox)
    assert 3 == len(items) - len(outbox)  # one record per request, nothing else


def test_records_list_shows_records_only(
    make_table: Any,
    dynamodb_client: Any,
    dynamodb_endpoint: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The operator's record listing leaves outbox items out."""
    table = make_table()

    @idempotent(
        persistence_store=DynamoDBPersistenceLayer(table, boto3_client=dynamodb_client),
        config=IdempotencyConfig(event_key_jmespath="id"),
    )
    def handler(event: dict[str, Any], context: Any) -> None:
        emit("A", {})
        emit("B", {})

    handler({"id": "a"}, None)
    code = main(
        ["records", "list", "--table", table, "--endpoint-url", dynamodb_endpoint, "--json"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert (0, 1) == (code, len(lines))
    assert "#outbox#" not in lines[0]
