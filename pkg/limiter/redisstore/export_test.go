package redisstore

// Redis key names, for tests of the layout.

func (s *Store) RateKey(key string) string  { return s.keys.rate(key) }
func (s *Store) SlotsKey(key string) string { return s.keys.slots(key) }
func (s *Store) RegistryKey() string        { return s.keys.registry() }
