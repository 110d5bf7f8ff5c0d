package redisstore

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"strings"
)

// Kinds of Redis keys.
const (
	kindRate     = 'r'
	kindSlots    = 'c'
	kindRegistry = 'n'
	kindJoined   = 'j'
	kindFeed     = 'f'
)

// keys builds the Redis keys of one service.
type keys struct {
	prefix  string
	service string // escaped
	raw     string // as given, hashed
}

func newKeys(prefix, service string) keys {
	return keys{prefix: prefix, service: escapeService(service), raw: service}
}

// escapeService escapes ':' and '\' so the service ends at the first
// unescaped ':'.
func escapeService(s string) string {
	if !strings.ContainsAny(s, `:\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == ':' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tag is the hash tag of (service, key): 16 hex digits of a 64-bit
// FNV-1a hash, the service length-prefixed so no two pairs hash alike by
// construction.
func (k keys) tag(key string) string {
	h := fnv.New64a()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(k.raw)))])
	h.Write([]byte(k.raw))
	h.Write([]byte(key))
	var b [16]byte
	s := strconv.AppendUint(b[:0], h.Sum64(), 16)
	return strings.Repeat("0", 16-len(s)) + string(s)
}

func (k keys) build(kind byte, key string, withKey bool) string {
	var b strings.Builder
	b.Grow(len(k.prefix) + 24 + len(k.service) + len(key))
	b.WriteString(k.prefix)
	b.WriteByte('{')
	b.WriteString(k.tag(key))
	b.WriteString("}:")
	b.WriteByte(kind)
	b.WriteByte(':')
	b.WriteString(k.service)
	if withKey {
		b.WriteByte(':')
		b.WriteString(key)
	}
	return b.String()
}

// rate is the Redis key of a rate key's record.
func (k keys) rate(key string) string { return k.build(kindRate, key, true) }

// slots is the Redis key of a concurrency key's record.
func (k keys) slots(key string) string { return k.build(kindSlots, key, true) }

// registry is the Redis key of the service's replica registry.
func (k keys) registry() string { return k.build(kindRegistry, "", false) }

// joined is the Redis key of the registry's other half: when each replica
// joined, and since. It shares the registry's hash tag.
func (k keys) joined() string { return k.build(kindJoined, "", false) }

// feed is the Redis key of the service's contention feed, a stream. It
// shares the registry's hash tag.
func (k keys) feed() string { return k.build(kindFeed, "", false) }

// reservationField is the hash field of replica's reservation.
func reservationField(replica string) string { return "r:" + replica }
