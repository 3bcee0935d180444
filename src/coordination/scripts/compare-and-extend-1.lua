-- Extends a lock's TTL only if we still own it.
-- KEYS[1] lock key
-- ARGV[1] owner value written by SET NX
-- ARGV[2] new TTL in milliseconds
-- Returns 1 when extended, 0 when the key is gone or owned by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
