-- An admin reset: usage to zero under a new epoch, so a snapshot taken before the reset can
-- never overwrite it in PostgreSQL (the flusher's upsert refuses an older epoch).
-- KEYS[1] counter hash   KEYS[2] dirty set   ARGV[1] dirty-set member   ARGV[2] epoch stored in PostgreSQL
-- Returns the new epoch.
local current = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local stored = tonumber(ARGV[2])
if stored > current then current = stored end
local epoch = current + 1
redis.call('HSET', KEYS[1], 'used', 0, 'epoch', epoch, 'seeded', 1)
redis.call('SADD', KEYS[2], ARGV[1])
return epoch
