"""The Lua scripts of the Redis state store (tq_gc/state/redis.py), one per atomic step.

Every time is read inside the script (`redis.call('TIME')`), never from a host: expiries of leases,
admissions and fences are computed on the Redis server's clock. Every write a sweeper makes checks its
lease token in the same script (`lease_guarded`): KEYS[1] is the lease, ARGV[1] the token, and a script
run without the lease returns 0 having written nothing.
"""

from __future__ import annotations

# The Redis server's clock, read inside a script (Redis 7 allows TIME in scripts).
_NOW_MS_LUA = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""


def _with_clock(body: str) -> str:
    return _NOW_MS_LUA + body


# Every write of a sweeper checks its lease token in the same script: KEYS[1] is the lease, ARGV[1] the token.
_HOLDS_LEASE_LUA = """
local function holds_lease()
  local value = redis.call('GET', KEYS[1])
  return value and cjson.decode(value).token == ARGV[1]
end
"""


def _lease_guarded(body: str) -> str:
    return _HOLDS_LEASE_LUA + "if not holds_lease() then return 0 end\n" + body


# `total` of an audit stream entry: rows appended to the log up to and including it.
_AUDIT_TOTAL_LUA = """
local function field_of(entry, name)
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end
local function total_of(entry)
  return tonumber(field_of(entry, 'total') or '0')
end
local function newest_total()
  local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  return newest and total_of(newest) or 0
end
"""


# Lua numbers are doubles: %d keeps ms-since-epoch exact where tostring's %.14g could round.
# While a sweeper holds the lease (KEYS[4]) the admission's rows also join the barrier (KEYS[5]), in the
# same step: no admission made during a sweep goes unseen. The barrier is a list: a head, "<lease token>
# <documents appended>", then the rows documents, appended in order, so that a sweeper reads each once
# (ADMITTED_SINCE) and can tell a barrier that vanished (evicted, deleted) or was shortened: a list
# without its head gets a head that names no lease, and a trimmed one no longer matches its count.
ADMIT = _with_clock("""
local expires_at_ms = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], string.format('%d', expires_at_ms), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('SET', KEYS[3], ARGV[4])
if redis.call('EXISTS', KEYS[4]) == 1 then
  local head = redis.call('LINDEX', KEYS[5], 0)
  local token, count = nil, nil
  if head then token, count = string.match(head, '^(%S+) (%d+)$') end
  if token then
    redis.call('RPUSH', KEYS[5], ARGV[2])
    redis.call('LSET', KEYS[5], 0, token .. ' ' .. string.format('%d', tonumber(count) + 1))
  elseif head then
    redis.call('RPUSH', KEYS[5], ARGV[2])
  else
    redis.call('RPUSH', KEYS[5], 'lost', ARGV[2])
  end
end
return expires_at_ms
""")

# The lease (KEYS[1]) taken if free, for ARGV[2] ms, and the barrier (KEYS[2]) started afresh with it,
# its head naming the lease's token (ARGV[3]); returns {taken, seconds, microseconds} (the clock reading
# that goes with the SET).
ACQUIRE_LEASE = """
local taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if taken then
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], ARGV[3] .. ' 0')
end
local t = redis.call('TIME')
return {taken and 1 or 0, t[1], t[2]}
"""

# The barrier's (KEYS[2]) rows documents after the ARGV[2] read already, while the lease is ours; -1 when
# the barrier is not whole (no head of this lease, or fewer documents than its head counts, or than read).
ADMITTED_SINCE = _lease_guarded("""
local length = redis.call('LLEN', KEYS[2])
local head = redis.call('LINDEX', KEYS[2], 0)
if head ~= ARGV[1] .. ' ' .. string.format('%d', length - 1) or tonumber(ARGV[2]) > length - 1 then
  return -1
end
return {1, redis.call('LRANGE', KEYS[2], tonumber(ARGV[2]) + 1, -1)}
""")

RENEW_ADMISSION = _with_clock("""
local now = now_ms()
local expires_at_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires_at_ms or tonumber(expires_at_ms) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[2])), ARGV[1])
return 1
""")

# Prunes expired admissions, then returns the rest as [id, rows_json, ...]: one consistent snapshot.
# A live admission without its rows (evicted by a maxmemory policy, or a hand edit) is an error, never
# an admission holding nothing: reading it as empty would release the rows it protects.
LIVE_ADMISSIONS = _with_clock("""
local now = string.format('%d', now_ms())
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local rows = redis.call('HGET', KEYS[2], id)
  if not rows then
    return redis.error_reply('live admission ' .. id .. ' has no rows: evicted? (maxmemory-policy)')
  end
  out[#out + 1] = id
  out[#out + 1] = rows
end
return out
""")

# GT: raising a fence never shortens one somebody else raised under the same name.
RAISE_FENCE = _with_clock("""
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', now_ms() + tonumber(ARGV[2])), ARGV[1])
redis.call('INCR', KEYS[2])
return 1
""")

LIVE_FENCES = _with_clock("""
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now_ms()))
return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
""")

# First-seen records of one partition (tq_gc/state/generations.py): KEYS[2] the generations, KEYS[4] the
# tombstones, KEYS[5] the earlier one-field-a-row hash. Refused (-1) unless the generations are still
# at the version the save was computed from (ARGV[4]) and no tombstone came after the ARGV[6] it read
# (one left would remove a row the save records afresh); then deletes ARGV[7] fields, sets the
# field-value pairs after them, drops the tombstones (all read), takes version ARGV[5], marks the partition
# observed at ARGV[3]. Lua's unpack has a stack limit: 1,000 arguments per command.
SAVE_FIRST_SEEN = _lease_guarded("""
if (redis.call('HGET', KEYS[2], 'version') or '') ~= ARGV[4] then return -1 end
if redis.call('LLEN', KEYS[4]) ~= tonumber(ARGV[6]) then return -1 end
local last_delete = 7 + tonumber(ARGV[7])
for i = 8, last_delete, 1000 do
  redis.call('HDEL', KEYS[2], unpack(ARGV, i, math.min(i + 999, last_delete)))
end
for i = last_delete + 1, #ARGV, 1000 do
  redis.call('HSET', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[2], 'version', ARGV[5])
redis.call('DEL', KEYS[4])
redis.call('UNLINK', KEYS[5])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return 1
""")

# UNLINK: a big generation hash is freed in the background, not while Redis serves everyone else.
FORGET_PARTITION = _lease_guarded("""
redis.call('UNLINK', KEYS[2], KEYS[4], KEYS[5])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
""")

# An intent: one stream entry per batch about to be deleted, refused (-1) while a fence is up or once the
# fence epoch moved from the sweep's (ARGV[7]); it marks a delete in flight (KEYS[5], PX ARGV[8]) until its
# confirmation. `total` counts every row appended so far, so the rows newer than an entry are
# total(newest) - total(entry): the oldest entries are trimmed while the newer ones still hold ARGV[2]
# rows, the newest never, nor any of this run's (ARGV[3]): a run may delete more rows than the cap.
# Returns the entry's id.
RECORD_INTENT = _with_clock(
    _lease_guarded(
        _AUDIT_TOTAL_LUA
        + """
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', string.format('%d', now_ms()))
if redis.call('ZCARD', KEYS[3]) > 0 or (redis.call('GET', KEYS[4]) or '0') ~= ARGV[7] then
  return -1
end
local maxlen = tonumber(ARGV[2])
local total = tonumber(ARGV[5]) + newest_total()
local id = redis.call('XADD', KEYS[2], '*', 'run_id', ARGV[3], 'partition', ARGV[4], 'n', ARGV[5],
  'total', string.format('%d', total), 'rows', ARGV[6])
redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[8])
local start = '-'
while true do
  local oldest = redis.call('XRANGE', KEYS[2], start, '+', 'COUNT', 1)[1]
  if total - total_of(oldest) < maxlen or field_of(oldest, 'run_id') == ARGV[3] then
    redis.call('XTRIM', KEYS[2], 'MINID', oldest[1])
    return id
  end
  start = '(' .. oldest[1]
end
"""
    )
)

# A confirmation names its intent and the intent's keys that were not deleted (usually none), drops
# first-seen records (a tombstone, ARGV[4], a JSON list of keys) and clears our in-flight mark (KEYS[4])
# in the same step.
CONFIRM_DELETES = _lease_guarded(
    _AUDIT_TOTAL_LUA
    + """
redis.call('XADD', KEYS[2], '*', 'confirms', ARGV[2], 'saved', ARGV[3], 'n', '0',
  'total', string.format('%d', newest_total()))
if ARGV[4] ~= '[]' then redis.call('RPUSH', KEYS[3], ARGV[4]) end
if redis.call('GET', KEYS[4]) == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
return 1
"""
)

# A run summary; with a token (ARGV[1] not empty), only while that lease is still ours.
RECORD_RUN = (
    _HOLDS_LEASE_LUA
    + """
if ARGV[1] ~= '' and not holds_lease() then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
return 1
"""
)

# The counts of the reference sources (KEYS[2]), replaced by the source-count pairs after the token.
# The baseline's birth (KEYS[3]) is kept from the first recording on: a store restarted empty has none.
RECORD_SOURCE_COUNTS = _with_clock(
    _lease_guarded("""
redis.call('SET', KEYS[3], string.format('%d', now_ms()), 'NX')
redis.call('DEL', KEYS[2])
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 1
""")
)

# the lease renewed (and our delete in flight, KEYS[5], with it: a clear slower than the TTL stays marked
# for as long as its sweeper lives) + live fences + admissions version + fence epoch:
# [expires_at_ms or '', version, epoch, fence, expiry, ...]
RECHECK = _with_clock("""
local now = now_ms()
local renewed = ''
local value = redis.call('GET', KEYS[1])
if value and cjson.decode(value).token == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  renewed = string.format('%d', now + tonumber(ARGV[2]))
  if redis.call('GET', KEYS[5]) == ARGV[1] then redis.call('PEXPIRE', KEYS[5], ARGV[2]) end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))
local out = {renewed, redis.call('GET', KEYS[3]) or '0', redis.call('GET', KEYS[4]) or '0'}
for _, item in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')) do
  out[#out + 1] = item
end
return out
""")

RELEASE_LEASE = """
local value = redis.call('GET', KEYS[1])
if value and cjson.decode(value).token == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
end
return 1
"""

LEASE_HOLDER = _with_clock("""
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return {value, now_ms() + redis.call('PTTL', KEYS[1])}
""")

# The store's id (KEYS[1]): ARGV[1] if it has none yet, else the one written first.
STORE_ID = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""
