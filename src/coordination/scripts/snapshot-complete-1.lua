-- Marks a bucket complete after a (re)build filled it, if it is still the generation that build
-- opened (a Redis that lost its data meanwhile holds a new or no bucket: not marked).
-- KEYS[1] bucket hash
-- ARGV[1] generation the build opened
-- ARGV[2] now in milliseconds
-- Returns 1 when marked, 0 otherwise.
if redis.call('HGET', KEYS[1], '_gen') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], '_complete', '1', '_built_at', ARGV[2])
redis.call('HINCRBY', KEYS[1], '_rev', 1)
return 1
