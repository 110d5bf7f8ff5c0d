// Package redisstore is the Redis implementation of limiter.Store: the
// shared state of the credit protocol, kept in Redis (single node,
// Sentinel or Cluster) and changed only by Lua scripts that port
// limiter.KeyRecord.Sync and limiter.ConcRecord.Sync. The in-process
// store (package memstore) is their executable specification, and a
// parity test holds every reply of these scripts to it, field by field.
//
// Key layout. Every key starts with a hash tag of 16 hex digits, a 64-bit
// FNV-1a hash of the service and the limiter key, so all of a key's state
// sits in one Redis hash in one cluster slot, and no byte of a descriptor
// ('{', '}', '|', ':', binary) can move it to another slot. The service
// (':' and '\' escaped) and the full limiter key follow, so distinct keys
// never share a Redis key:
//
//	[prefix]{h}:r:<service>:<key>   rate key: a hash of
//	                                  x       record expiry (µs)
//	                                  w       window states
//	                                  p       when a sliding window stops
//	                                          counting as pressed (µs)
//	                                  r:<id>  replica id's reservation
//	                                  s:<id>  replica id's static share
//	[prefix]{h}:c:<service>:<key>   concurrency key: r:<id> → id's slots
//	[prefix]{g}:n:<service>         replica registry: a sorted set of
//	                                replica ids scored by lease expiry
//	[prefix]{g}:j:<service>         a hash: j:<id> → when replica id
//	                                joined (µs); since
//	[prefix]{g}:f:<service>         contention feed: a stream of the keys
//	                                replicas need others' shares of
//
// The three service keys share one hash tag {g}, the service's own (the
// tag of the empty key), so one script reaches
// both halves of the registry on a Cluster. Every key of a rate or
// concurrency key carries a PEXPIREAT at the instant the reference store
// would forget it (a rate key a second later, as a script call reads its
// keys against one TIME), so idle keys cost no memory. The registry does
// not expire: like the reference store's, it remembers since (the latest
// lease end it forgot), and it stays small, at most 1024 replicas whose
// lease ended within 25 hours. The feed keeps its last 1024 entries or
// so (MAXLEN ~) and expires an hour after its last one.
//
// Scripts (embedded, loaded once, run with EVALSHA and reloaded on
// NOSCRIPT): rate (the sync of one or more rate keys at one TIME), slots
// (one concurrency key's sync), heartbeat (renew a lease, forget the
// replicas gone for 25 hours, list the rest) and leave (end a lease).
// On Redis 7 or later the rate script runs as a function (FCALL of
// rls_rate_<hash>, in the library rls_lib_rate_<hash>, loaded with
// FUNCTION LOAD on every master at the first "Function not found"),
// which makes its definitions once, not on every call: about a tenth of
// a call of five keys, a quarter of a call of one (a Cluster's). A server
// before 7.0, or an ACL user without FCALL and FUNCTION, gets EVALSHA
// instead (functions.go).
// Each version of the script loads its own library; a retired one's
// stays until FUNCTION DELETE.
// Release is a plain HDEL. The contention feed is written after the rate
// script, with XADD, for the items whose reply says contended or filled
// (best effort: the round stands if it fails; a full entry carries its
// windows under "full", which a reader of an older version skips), and
// read with XREAD from the reader's cursor, an entry id.
//
// Clock. Scripts read Redis TIME, in microseconds since the Unix epoch,
// so replica clocks may disagree. Lua numbers are doubles: the scripts
// keep every value an integer below 2^53 (instants until the year 2255,
// counts far beyond limiter's 2^40 cap) and compute the sliding window's
// products, which may pass 2^53, with exact long multiplication. Inputs
// above 2^53 - 1 (limiter.MaxExact: wanted units, pushed hits) are
// clamped, which changes no result while limits stay below 2^53; counts
// and token bucket arrival times saturate at 2^53 - 1, as the reference
// clamps them after every charge, so a huge debt keeps a bucket empty.
//
// Round trips. Sync and SyncSlots send their items in one pipeline (split
// per node by a cluster client): SyncSlots one EVALSHA per item, Sync one
// per batch of up to 32 keys on a single node or Sentinel master, whose
// keys all live on one server, and one per key on a Cluster or Ring; a
// round with contended or filled items takes one more, for their XADDs. The
// store never retries: the sync loop's next tick is the retry, so
// configure the client without retries. A round that fails may still have
// applied some of its items; replaying one only over-counts (hits are
// charged twice), never over-admits.
//
// Errors wrap limiter.ErrStoreUnavailable when Redis cannot be reached
// (connection, timeout, loading, failover, cluster down).
//
// A Store is safe for concurrent use.
package redisstore
