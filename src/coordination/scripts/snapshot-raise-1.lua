-- Raises a bucket's epoch to a PostgreSQL answer's, before that answer returns, so no later
-- snapshot answer from this bucket is older. A bucket that does not exist (or is not a well-formed
-- hash) is left alone: one opened later completes at the high-water read after it was opened,
-- which is at least this epoch.
-- KEYS[1] bucket hash
-- ARGV[1] epoch
-- Returns 1 when raised, 0 otherwise.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or not redis.call('HGET', KEYS[1], '_gen') then return 0 end
local epoch = tonumber(redis.call('HGET', KEYS[1], '_epoch'))
if not epoch or tonumber(ARGV[1]) <= epoch then return 0 end
redis.call('HSET', KEYS[1], '_epoch', ARGV[1])
redis.call('HINCRBY', KEYS[1], '_rev', 1)
return 1
