-- Marks a bucket complete after a (re)build filled it, if it is still the generation that build
-- opened (a Redis that lost its data meanwhile holds a new or no bucket: not marked).
-- KEYS[1] bucket hash
-- ARGV[1] generation the build opened
-- ARGV[2] now in milliseconds
-- ARGV[3] epoch floor: the version counter read before the build read its rows
-- Returns 1 when marked, 0 otherwise.
if redis.call('HGET', KEYS[1], '_gen') ~= ARGV[1] then return 0 end
local epoch = tonumber(redis.call('HGET', KEYS[1], '_epoch')) or 0
if tonumber(ARGV[3]) > epoch then epoch = tonumber(ARGV[3]) end
redis.call('HSET', KEYS[1], '_complete', '1', '_built_at', ARGV[2], '_epoch', tostring(epoch))
redis.call('HINCRBY', KEYS[1], '_rev', 1)
return 1
