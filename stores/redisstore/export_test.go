package redisstore

// StopLease stops renewing the node's lease without giving it up, as a
// killed process would: it expires after LeaseTTL.
func (s *Store) StopLease() { s.leaseStop() }
