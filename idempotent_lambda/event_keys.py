"""Keys for events that need no adapter: `IdempotencyConfig(event_key_jmespath=event_keys.SNS)`.

Each constant names what the service repeats when it delivers one event again, and nothing it
could repeat for two different events:

- `EVENTBRIDGE`: the event's `id`. EventBridge keeps it on every retry to a target (and
  Lambda's asynchronous retries resend the same event); every `PutEvents` entry gets a new one,
  so a producer that puts the same fact twice makes two events: key on a field of `detail`
  for that.
- `SNS`: the record's `Sns.MessageId`. SNS keeps the original id when it retries a delivery; a
  second `Publish` of the same message gets a new one.
- `S3`: bucket, object key and `sequencer`. A repeated notification carries the same
  sequencer, and each new PUT or DELETE of the key gets a new one, so a new version of an
  object runs again. Notifications without a sequencer (restore, tagging, ACL, lifecycle
  transitions) find no key: they run without idempotency, or fail with
  `raise_on_no_idempotency_key=True`, rather than share one key per object.

- `OUTBOX_EVENT`: the id `idempotent_lambda.outbox.emit` returned, which the outbox publisher
  puts at `detail.outbox.id`, with the event's `account` and `source`. The id is the same when
  the publisher sends the event twice (a crash between `PutEvents` and marking it published),
  while EventBridge's own `id` differs; the account and source keep an event put by another
  account, or under another source, from ever sharing a key with a real one. It is found in
  the event itself (a rule invoking Lambda) and in an SQS message's body (a rule targeting a
  queue, under `idempotent_sqs_handler`); an event without an outbox id has no key.

SNS and S3 deliver one record per invocation; the presets read the first.
"""

from __future__ import annotations

__all__ = ["EVENTBRIDGE", "OUTBOX_EVENT", "S3", "SNS"]

#: An EventBridge event (any rule target invoking Lambda): its `id`.
EVENTBRIDGE = "id"

#: An SNS notification delivered to Lambda: its `MessageId`.
SNS = "Records[0].Sns.MessageId"

#: An S3 event notification delivered to Lambda: bucket, object key and `sequencer`.
S3 = (
    "Records[0].s3.object.sequencer && "
    "[Records[0].s3.bucket.name, Records[0].s3.object.key, Records[0].s3.object.sequencer]"
)

#: An outbox event: its outbox id, account and source, in the EventBridge event or in an SQS
#: message's body. (``x && [...]``: a list of nulls is truthy in JMESPath, so no id, no key.)
OUTBOX_EVENT = (
    "detail.outbox.id && [detail.outbox.id, account, source] || "
    "((body && powertools_json(body)) | detail.outbox.id && [detail.outbox.id, account, source])"
)
