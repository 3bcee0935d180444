-- Releases a lock only if we still own it.
-- KEYS[1] lock key
-- ARGV[1] owner value written by SET NX
-- Returns 1 when deleted, 0 when the key is gone or owned by someone else.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
