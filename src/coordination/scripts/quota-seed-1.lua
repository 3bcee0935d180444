-- Seeds a counter hash with the value last stored in PostgreSQL, once (the first seeder wins),
-- so a Redis that lost its data does not start counting again from zero.
-- KEYS[1] counter hash   ARGV[1] stored used   ARGV[2] stored epoch
-- Returns 1 if this call seeded, 0 if the hash was already seeded.
if redis.call('HSETNX', KEYS[1], 'seeded', 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'used', ARGV[1])
  redis.call('HSET', KEYS[1], 'epoch', ARGV[2])
  return 1
end
return 0
