-- Adds to a user's platform usage counter and marks it dirty for the flusher.
-- KEYS[1] counter hash (fields: used, epoch, seeded)   KEYS[2] dirty set
-- ARGV[1] amount (integer >= 0)                        ARGV[2] dirty-set member
-- Returns { used, seeded } where seeded = 0 means the hash was not yet seeded from PostgreSQL.
local used = redis.call('HINCRBY', KEYS[1], 'used', ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
local seeded = redis.call('HEXISTS', KEYS[1], 'seeded')
return { used, seeded }
