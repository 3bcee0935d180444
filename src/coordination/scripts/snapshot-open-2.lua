-- Opens a snapshot bucket for a (re)build: creates it (not yet complete) unless it exists.
-- KEYS[1] bucket hash
-- KEYS[2] set of known buckets
-- ARGV[1] generation id for a bucket created now
-- ARGV[2] '1' to discard the bucket first (it held a corrupt or foreign value)
-- ARGV[3] member naming the bucket in KEYS[2]
-- ARGV[4] now in milliseconds
-- ARGV[5] epoch floor for a bucket created now (the version counter before the build reads), so a
--        bucket rebuilt after Redis lost its data never reports an older epoch than before
-- A key of another type is discarded too. Returns the bucket's generation.
if ARGV[2] == '1' or (redis.call('EXISTS', KEYS[1]) == 1 and redis.call('TYPE', KEYS[1]).ok ~= 'hash') then
  redis.call('DEL', KEYS[1])
end
redis.call('SADD', KEYS[2], ARGV[3])
local gen = redis.call('HGET', KEYS[1], '_gen')
if gen then return gen end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '_gen', ARGV[1], '_epoch', ARGV[5], '_rev', '0', '_opened_at', ARGV[4])
return ARGV[1]
