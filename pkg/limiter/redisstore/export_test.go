package redisstore

import "context"

// Redis key names, for tests of the layout.

func (s *Store) RateKey(key string) string  { return s.keys.rate(key) }
func (s *Store) SlotsKey(key string) string { return s.keys.slots(key) }
func (s *Store) RegistryKey() string        { return s.keys.registry() }
func (s *Store) JoinedKey() string          { return s.keys.joined() }
func (s *Store) FeedKey() string            { return s.keys.feed() }

// LeaveNow is Leave, returning the store clock's instant it applied at.
func (s *Store) LeaveNow(ctx context.Context, replica string) (int64, error) {
	return s.leave(ctx, replica)
}

// NoFunctions has s run the rate script with EVALSHA, as on a server
// before Redis 7.0.
func NoFunctions(s *Store) *Store {
	s.noFunctions.Store(true)
	return s
}

// UsesFunctions reports whether s runs the rate script as a function.
func (s *Store) UsesFunctions() bool { return !s.noFunctions.Load() }

// RateFunction is the rate function's name, its library's code and the
// error of making it.
func RateFunction() (name, lib string, err error) {
	return rateFunction.name, rateFunction.lib, rateFunctionErr
}
