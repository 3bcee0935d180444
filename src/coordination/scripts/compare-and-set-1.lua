-- Takes a lock over from a holder known to be gone (its round's lease was taken over in
-- PostgreSQL first): replaces the value only if it is still the one we saw, or the key is gone.
-- KEYS[1] lock key
-- ARGV[1] owner value we saw   ARGV[2] our owner value   ARGV[3] TTL in milliseconds
-- Returns 1 when set, 0 when someone else changed the key meanwhile.
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
