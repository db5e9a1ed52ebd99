"""The Lua scripts that make each Redis store operation one atomic round trip.

Redis runs a script without interleaving any other command, so each check-then-write below is
as atomic as DynamoDB's conditional writes. Field names arrive as arguments, never spliced into
the source, so every store shares the same three scripts (and Redis' compiled-script cache).
Numbers compare as Lua doubles: exact for epoch milliseconds (below 2**53).
"""

from __future__ import annotations

from idempotent_lambda.record import Status

_IN_PROGRESS = Status.IN_PROGRESS.value

#: CLAIM_JSON's first reply element when the record may be taken over only under Powertools'
#: orphan lock (see `_redis_json.orphan_lock_key`).
NEEDS_ORPHAN_LOCK = 2

# Shared by complete and release. ARGV[1..4]: status field, owner field, "1" when an owner is
# expected (else the record must have none), the owner.
_OWNED = f"""
local state = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[2])
local owned
if ARGV[3] == '1' then owned = state[2] == ARGV[4] else owned = not state[2] end
if state[1] ~= '{_IN_PROGRESS}' or not owned then return 0 end
"""

# Replace the hash with ARGV[first..] (field, value pairs) and give it a TTL of ARGV[ttl] ms
# ('' for none).
_REPLACE = """
local function replace(first, ttl)
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], unpack(ARGV, first))
  if ttl ~= '' then redis.call('PEXPIRE', KEYS[1], ttl) end
end
"""

CLAIM = (
    _REPLACE
    + f"""
-- ARGV: now (epoch s), lease cutoff (epoch ms), ttl (ms or ''), expiry field, status field,
-- lease field, then the new record's fields. The rule of persistence.base.claim_allowed.
local old = redis.call('HGETALL', KEYS[1])
if #old > 0 then
  local f = {{}}
  for i = 1, #old, 2 do f[old[i]] = old[i + 1] end
  local expiry = tonumber(f[ARGV[4]])
  local lease = tonumber(f[ARGV[6]])
  local expired = expiry ~= nil and expiry < tonumber(ARGV[1])
  local abandoned = f[ARGV[5]] == '{_IN_PROGRESS}' and lease ~= nil and lease < tonumber(ARGV[2])
  if not (expired or abandoned) then return {{0, old}} end
end
replace(7, ARGV[3])
return {{1, old}}
"""
)

COMPLETE = (
    _REPLACE
    + _OWNED
    + """
-- ARGV[5]: ttl (ms or ''); ARGV[6..]: the COMPLETED record's fields.
replace(6, ARGV[5])
return 1
"""
)

RELEASE = (
    _OWNED
    + """
redis.call('DEL', KEYS[1])
return 1
"""
)

#: Every hash in KEYS, read in one script: a list of HGETALL replies in KEYS order.
GET_MANY = """
local replies = {}
for i, key in ipairs(KEYS) do
  replies[i] = redis.call('HGETALL', key)
end
return replies
"""

# --- Powertools' layout: one JSON string per key (see `_redis_json`). The record is decoded
# with cjson only to read it; the new value arrives ready-made, so numbers are never re-encoded.

# Shared by complete and release. ARGV[1..5]: status field, owner field, IN_PROGRESS spelling,
# "1" when an owner is expected (else the record must have none), the owner.
_OWNED_JSON = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, r = pcall(cjson.decode, raw)
if not ok or type(r) ~= 'table' or r[ARGV[1]] ~= ARGV[3] then return 0 end
local owner = r[ARGV[2]]
if owner == cjson.null then owner = nil end
if ARGV[4] == '1' then
  if owner ~= ARGV[5] then return 0 end
elseif owner ~= nil then return 0 end
"""

# Store ARGV[value] at the key with a TTL of ARGV[ttl] ms ('' for none).
_SET_JSON = """
local function store(value, ttl)
  if ttl == '' then redis.call('SET', KEYS[1], value)
  else redis.call('SET', KEYS[1], value, 'PX', ttl) end
end
"""

CLAIM_JSON = (
    _SET_JSON
    + f"""
-- ARGV: now (epoch s), lease cutoff (epoch ms), ttl (ms or ''), expiry field, status field,
-- lease field, IN_PROGRESS spelling, the new record's JSON, '1' when the caller holds
-- Powertools' orphan lock. The rule of claim_allowed; a value that is not a JSON object blocks
-- the claim (and is reported as corrupt by the caller). Taking over an expired or abandoned
-- record needs that lock: without it the reply is {{{NEEDS_ORPHAN_LOCK}, old}}.
local old = redis.call('GET', KEYS[1])
if old then
  local ok, r = pcall(cjson.decode, old)
  if not ok or type(r) ~= 'table' then return {{0, old}} end
  local expiry = tonumber(r[ARGV[4]])
  local lease = tonumber(r[ARGV[6]])
  local expired = expiry ~= nil and expiry < tonumber(ARGV[1])
  local abandoned = r[ARGV[5]] == ARGV[7] and lease ~= nil and lease < tonumber(ARGV[2])
  if not (expired or abandoned) then return {{0, old}} end
  if ARGV[9] ~= '1' then return {{{NEEDS_ORPHAN_LOCK}, old}} end
end
store(ARGV[8], ARGV[3])
return {{1, old}}
"""
)

COMPLETE_JSON = (
    _SET_JSON
    + _OWNED_JSON
    + """
-- ARGV[6]: ttl (ms or ''); ARGV[7]: the COMPLETED record's JSON.
store(ARGV[7], ARGV[6])
return 1
"""
)

RELEASE_JSON = (
    _OWNED_JSON
    + """
redis.call('DEL', KEYS[1])
return 1
"""
)
