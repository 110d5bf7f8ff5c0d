// Package policy turns policy files into an immutable, compiled Snapshot
// and keeps it current as the files change.
//
// # Files
//
// Two kinds of YAML file are read, alone or together:
//
//   - rate-limit files in the envoyproxy/ratelimit format (a domain and
//     its nested descriptors), so existing ConfigMaps load unchanged;
//     rate_limit also takes this service's additions (algorithm, burst,
//     the limiter's tuning knobs, always_charge). See RateLimitFile.
//   - targets files, a top-level targets map of per-target policy for
//     ext_proc (rate and token limits, concurrency cap, retry, fallbacks).
//     See TargetsFile.
//
// The schema types (RateLimitFile, TargetsFile and the types they hold)
// are the one definition of the keys: the decoder reads a key only by
// their yaml tags, so a key is known, decoded and checked by validate
// exactly when a schema field names it.
//
// # Model
//
// Loading goes file → YAML tree → checked blocks → compiled Snapshot. It is
// lenient per block: a malformed block (one rate_limit, one descriptor,
// one target's retry_config) is dropped with a Problem naming the file and
// the path inside it, and the record that carries it survives; unknown
// keys (keys no schema field names) are warnings. A file that is not
// YAML, or not a mapping, is rejected whole. Across files, a domain or
// target defined twice is kept from the first file by name and dropped
// from the later one, unless LoadOptions.MergeDomains asks for
// envoyproxy/ratelimit's merging of a domain's descriptors.
// LoadOptions.ShadowMode marks a whole snapshot as shadow (nothing is
// denied); the zero LoadOptions is the default.
//
// A Snapshot answers which limit applies to a request descriptor (Match,
// or Domain and Node.Child step by step, which never allocate), and which
// target serves a name, model or cluster. Limits and targets carry their
// compiled limiter.Rule and its fingerprint.
//
// # Zero values and concurrency
//
// A Snapshot, its Nodes, Limits and Targets are immutable once built and
// safe for concurrent use. A nil *Snapshot and a nil *Node behave as
// empty: no domain, no match. A Watcher publishes each new Snapshot with
// an atomic pointer swap; readers call Current on every request and never
// block. A Watcher's goroutine is its owner's: Run returns when its
// context ends.
package policy
