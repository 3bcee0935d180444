-- Writes snapshot entries, each only if its version is newer than the one stored: a slow writer
-- holding an older read can never replace a newer entry (equal versions are the same data).
-- KEYS[1] bucket hash
-- ARGV[1] now in milliseconds
-- ARGV[2..] pairs: field ('a:<account id>'), value ('<version>|<entry json>', json empty = not schedulable)
-- Returns the entries written, or -1 when the bucket does not exist (not opened: nothing written,
-- the next read repairs it from PostgreSQL).
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local epoch = tonumber(redis.call('HGET', KEYS[1], '_epoch')) or 0
local written = 0
for i = 2, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  local v = tonumber(string.match(value, '^(%d+)|'))
  local cur = redis.call('HGET', KEYS[1], field)
  local cv = -1
  if cur then cv = tonumber(string.match(cur, '^(%d+)|')) or -1 end
  if v and v > cv then
    redis.call('HSET', KEYS[1], field, value)
    written = written + 1
    if v > epoch then epoch = v end
  end
end
if written > 0 then
  redis.call('HSET', KEYS[1], '_epoch', tostring(epoch), '_written_at', ARGV[1])
  redis.call('HINCRBY', KEYS[1], '_rev', written)
end
return written
