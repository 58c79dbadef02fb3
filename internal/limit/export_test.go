package limit

// MaxTenants is how many tenants an instance tracks before it forgets.
const MaxTenants = maxTenants

// Tracked is how many tenants l tracks.
func (l *Limiter) Tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tenants)
}
