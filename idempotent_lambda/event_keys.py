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
- `STEP_FUNCTIONS_TASK`: `execution_id` and `state_name`, which the task state passes in its
  payload (`$$.Execution.Id` and `$$.State.Name`). A retry of the state keeps both; a new
  execution has a new id. The retry count is never part of the key.
- `CLOUDFORMATION_CUSTOM_RESOURCE`: `StackId`, `RequestId` and `LogicalResourceId`.
  CloudFormation sends a request again with the same `RequestId`; each create, update and
  delete is a new request.
- `SCHEDULER`: `schedule_arn` and `scheduled_time`, which the schedule's target input carries
  (`<aws.scheduler.schedule-arn>`, `<aws.scheduler.scheduled-time>`): one key per occurrence of
  the schedule, whatever the attempt. `<aws.scheduler.execution-id>` is new on every attempt.
- `S3_BATCH_OPERATIONS`: the job's `id` and the task's `taskId` (schema 1.0 and 2.0).

SNS, S3 and S3 Batch Operations deliver one record (task) per invocation; the presets read the
first. Every preset finds no key in an event of another shape (none of its fields, or only some
of them), so a config with `raise_on_no_idempotency_key=True` refuses the event with
`IdempotencyKeyError` before the body runs.
"""

from __future__ import annotations

from idempotent_lambda._outbox_format import DETAIL_KEY, ID_FIELD, QUEUE_BODY

__all__ = [
    "CLOUDFORMATION_CUSTOM_RESOURCE",
    "EVENTBRIDGE",
    "OUTBOX_EVENT",
    "S3",
    "S3_BATCH_OPERATIONS",
    "SCHEDULER",
    "SNS",
    "STEP_FUNCTIONS_TASK",
]

# A JMESPath list of nulls is truthy, so a preset of several fields is written `a && b && [a, b]`:
# an event missing any of them yields null (no key), never a partial key.

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
_OUTBOX_ID = f"detail.{DETAIL_KEY}.{ID_FIELD}"
_OUTBOX_KEY = f"{_OUTBOX_ID} && [{_OUTBOX_ID}, account, source]"
OUTBOX_EVENT = f"{_OUTBOX_KEY} || (({QUEUE_BODY} && powertools_json({QUEUE_BODY})) | {_OUTBOX_KEY})"

#: A Step Functions task state's payload: the execution's id and the state's name.
STEP_FUNCTIONS_TASK = "execution_id && state_name && [execution_id, state_name]"

#: A CloudFormation custom resource request: stack, request and logical resource.
CLOUDFORMATION_CUSTOM_RESOURCE = (
    "StackId && RequestId && LogicalResourceId && [StackId, RequestId, LogicalResourceId]"
)

#: An EventBridge Scheduler target's input: the schedule's ARN and the scheduled time.
SCHEDULER = "schedule_arn && scheduled_time && [schedule_arn, scheduled_time]"

#: An S3 Batch Operations task: the job's id and the task's id.
S3_BATCH_OPERATIONS = "job.id && tasks[0].taskId && [job.id, tasks[0].taskId]"
