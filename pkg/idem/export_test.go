package idem

// CacheLen is how many entries c holds, for the tests.
func CacheLen(c *ReplayCache) int { return c.len() }
