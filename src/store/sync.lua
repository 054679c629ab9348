-- One node's sync with the cluster, in one round trip (src/store/shared/).
-- ARGV: prefix, member, now_ms, dead_after_ms,
--       n, (key, value, expire_at_ms) * n   -- this member's absolute values
--       n, (room, demand) * n
--       n, (mark, until_ms) * n
--       mark cursor (a stream id), seed candidate (hex),
--       n, (room, version, overrides JSON) * n, the overrides generation this member has read,
--       n, (register, value) * n   -- registers changed here, merged by the highest value
--       n, (room, size) * n        -- blocks of queue numbers wanted
-- Returns {registered, live members, {key, others' sum}..., {room, {member, demand}...}...,
--          {mark, until}..., new mark cursor, the cluster's key seed,
--          {room, "version|JSON"}... (all of them when the generation moved, else none),
--          the overrides generation, {register, value}..., {room, the block's last number}...}.
local prefix, member = ARGV[1], ARGV[2]
local now, dead = tonumber(ARGV[3]), tonumber(ARGV[4])
local nodes = prefix .. 'nodes'
local registered = 0
if redis.call('ZSCORE', nodes, member) then registered = 1 end
redis.call('ZADD', nodes, now, member)
redis.call('ZREMRANGEBYSCORE', nodes, '-inf', now - dead)
redis.call('PEXPIRE', nodes, dead * 20)

local index = prefix .. 'keys'
local i = 5
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local k, v, exp = ARGV[i], ARGV[i + 1], ARGV[i + 2]; i = i + 3
  local h = prefix .. k
  redis.call('HSET', h, member, v)
  redis.call('PEXPIREAT', h, exp)
  redis.call('ZADD', index, exp, k)
end

n = tonumber(ARGV[i]); i = i + 1
local rooms = {}
for _ = 1, n do
  local room, d = ARGV[i], ARGV[i + 1]; i = i + 2
  local h = prefix .. 'demand|' .. room
  redis.call('HSET', h, member, d)
  redis.call('PEXPIRE', h, 120000)
  rooms[#rooms + 1] = room
end

n = tonumber(ARGV[i]); i = i + 1
local stream = prefix .. 'marks'
for _ = 1, n do
  redis.call('XADD', stream, 'MAXLEN', '~', '100000', '*', 'm', ARGV[i], 'u', ARGV[i + 1])
  i = i + 2
end
local cursor = ARGV[i]
local seed_key = prefix .. 'seed'
redis.call('SET', seed_key, ARGV[i + 1], 'NX')
local seed = redis.call('GET', seed_key)

-- Operator overrides: per room, the newest version wins.
i = i + 2
local ctl, ctl_gen = prefix .. 'controls', prefix .. 'controls_gen'
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local room, ver, doc = ARGV[i], ARGV[i + 1], ARGV[i + 2]; i = i + 3
  local cur = redis.call('HGET', ctl, room)
  local cur_ver = -1
  if cur then cur_ver = tonumber(string.match(cur, '^(%d+)|')) or -1 end
  if tonumber(ver) > cur_ver then
    redis.call('HSET', ctl, room, ver .. '|' .. doc)
    redis.call('INCR', ctl_gen)
  end
end
local seen = ARGV[i]
i = i + 1

-- Registers (queue numbers, serving counters, resets): each keeps its highest value.
local regs = prefix .. 'registers'
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local k, v = ARGV[i], ARGV[i + 1]; i = i + 2
  local cur = redis.call('HGET', regs, k)
  if not cur or tonumber(v) > tonumber(cur) then redis.call('HSET', regs, k, v) end
end
-- Blocks of queue numbers: unique, in the order the nodes ask.
n = tonumber(ARGV[i]); i = i + 1
local blocks = {}
for _ = 1, n do
  local room, size = ARGV[i], ARGV[i + 1]; i = i + 2
  local counter = prefix .. 'qn|' .. room
  -- Never below a number a node remembers giving (a store that lost its data).
  local floor = redis.call('HGET', regs, 'g|qn|' .. room) or '0'
  if tonumber(redis.call('GET', counter) or '0') < tonumber(floor) then
    redis.call('SET', counter, floor)
  end
  -- When this numbering began: kept, or now (nobody remembers an earlier one).
  redis.call('HSETNX', regs, 'g|ns|' .. room, ARGV[3])
  blocks[#blocks + 1] = room
  blocks[#blocks + 1] = tostring(redis.call('INCRBY', counter, size))
end
local registers = redis.call('HGETALL', regs)
local gen = redis.call('GET', ctl_gen) or '0'
local controls = {}
if gen ~= seen then
  controls = redis.call('HGETALL', ctl)
end

redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
local live = redis.call('ZRANGE', nodes, 0, -1)
local alive = {}
for _, m in ipairs(live) do alive[m] = true end

local counters = {}
for _, k in ipairs(redis.call('ZRANGE', index, 0, -1)) do
  local fields = redis.call('HGETALL', prefix .. k)
  local sum = 0
  for j = 1, #fields, 2 do
    if fields[j] ~= member then sum = sum + tonumber(fields[j + 1]) end
  end
  if sum ~= 0 then
    counters[#counters + 1] = k
    counters[#counters + 1] = tostring(sum)
  end
end

local demand = {}
for _, room in ipairs(rooms) do
  local fields = redis.call('HGETALL', prefix .. 'demand|' .. room)
  local out = {}
  for j = 1, #fields, 2 do
    if alive[fields[j]] then
      out[#out + 1] = fields[j]
      out[#out + 1] = fields[j + 1]
    end
  end
  demand[#demand + 1] = room
  demand[#demand + 1] = out
end

local marks = {}
local last = cursor
for _, e in ipairs(redis.call('XRANGE', stream, '(' .. cursor, '+', 'COUNT', 10000)) do
  last = e[1]
  local f = e[2]
  if tonumber(f[4]) > now then
    marks[#marks + 1] = f[2]
    marks[#marks + 1] = f[4]
  end
end
redis.call('PEXPIRE', stream, 86400000)

return {registered, live, counters, demand, marks, last, seed, controls, gen, registers, blocks}
