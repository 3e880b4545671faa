\echo Use "CREATE EXTENSION reshard_fence SCHEMA reshard" to load this file. \quit

-- The trigger function of an accelerated fence: EXECUTE FUNCTION
-- reshard.fence_accel('<fence identity>', '<key column>', '<key type>').
CREATE FUNCTION fence_accel() RETURNS trigger LANGUAGE c AS 'MODULE_PATHNAME', 'reshard_fence_accel';
