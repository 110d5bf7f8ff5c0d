package policy

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
)

// The types below are the schema of the two file kinds the package reads,
// and its only definition: the decoder knows a key only by their yaml tags
// (any other key is an unknown-key warning), and decodes a scalar field
// into them by the field's type. Blocks, lists and fields with rules of
// their own are decoded by hooks, keyed by the same tags. The decoder walks
// the YAML tree itself, to report paths and to drop only the bad block, so
// the types have no custom unmarshalling.

// documentSpec is what one YAML document may hold: a rate-limit file, a
// targets file, or both.
type documentSpec struct {
	RateLimitFile `yaml:",inline"`
	TargetsFile   `yaml:",inline"`
}

// RateLimitFile is an envoyproxy/ratelimit-compatible file: one domain and
// its descriptor tree.
type RateLimitFile struct {
	Domain      string           `yaml:"domain"`
	Descriptors []DescriptorSpec `yaml:"descriptors"`
}

// DescriptorSpec is one level of a descriptor tree. Key is required; an
// empty Value matches any value of Key (key-only); a Value with '*' is a
// glob. ShareThreshold makes all values matching a wildcard or key-only
// descriptor share one counter.
type DescriptorSpec struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *RateLimitSpec   `yaml:"rate_limit"`
	Descriptors    []DescriptorSpec `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	// QuotaMode: the request is denied only when every quota-mode
	// descriptor is over its limit, or another descriptor is.
	QuotaMode bool `yaml:"quota_mode"`
	// Metadata is returned in the RLS response's dynamic metadata when
	// the descriptor passed.
	Metadata map[string]any `yaml:"metadata"`
}

// RateLimitSpec is a descriptor's rate_limit block: the fields of
// envoyproxy/ratelimit, then this service's additions.
type RateLimitSpec struct {
	Name            string         `yaml:"name"`
	Unit            string         `yaml:"unit"`
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	UnitMultiplier  uint32         `yaml:"unit_multiplier"`
	Unlimited       bool           `yaml:"unlimited"`
	Replaces        []ReplacesSpec `yaml:"replaces"`

	Algorithm          string        `yaml:"algorithm"` // fixed_window (default), sliding_window, token_bucket
	Burst              uint32        `yaml:"burst"`     // token bucket size; zero means requests_per_unit
	LocalAllowance     float64       `yaml:"local_allowance"`
	SyncInterval       time.Duration `yaml:"sync_interval"`
	RedisTimeout       time.Duration `yaml:"redis_timeout"`
	CacheTTL           time.Duration `yaml:"cache_ttl"`
	OnStoreUnavailable string        `yaml:"on_store_unavailable"` // static (default) or allow
	AlwaysCharge       bool          `yaml:"always_charge"`
	// QuotaMode here is accepted with a warning: it belongs on the
	// descriptor.
	QuotaMode bool `yaml:"quota_mode"`
}

// ReplacesSpec names a rate limit that a matching descriptor replaces.
type ReplacesSpec struct {
	Name string `yaml:"name"`
}

// TargetsFile holds per-target policy for ext_proc, keyed by target name.
type TargetsFile struct {
	Targets map[string]TargetSpec `yaml:"targets"`
}

// TargetSpec is one target: a model deployment, an upstream, a route.
type TargetSpec struct {
	Provider      string `yaml:"provider"`
	APIHost       string `yaml:"api_host"`
	Cluster       string `yaml:"cluster"` // default: the target name
	Model         string `yaml:"model"`   // default: the target name
	ContextWindow uint32 `yaml:"context_window"`
	// DefaultMaxTokens: the output a token estimate assumes when a request
	// sets no max_tokens.
	DefaultMaxTokens uint32 `yaml:"default_max_tokens"`
	// StreamUsage: inject adds stream_options.include_usage to a streamed
	// OpenAI-style request that lacks it; off (the default) leaves it.
	StreamUsage    string           `yaml:"stream_usage"`
	RateLimits     *RateLimitsSpec  `yaml:"rate_limits"`
	TokenLimits    *TokenLimitsSpec `yaml:"token_limits"`
	MaxConcurrent  uint32           `yaml:"max_concurrent"`
	RetryConfig    *RetryConfigSpec `yaml:"retry_config"`
	FallbackModels []string         `yaml:"fallback_models"` // at most 5 target names
}

// RateLimitsSpec is a target's request limits: every non-zero window
// applies. Enabled defaults to true.
type RateLimitsSpec struct {
	Algorithm          string  `yaml:"algorithm"`
	RequestsPerSecond  uint32  `yaml:"requests_per_second"`
	RequestsPerMinute  uint32  `yaml:"requests_per_minute"`
	RequestsPerHour    uint32  `yaml:"requests_per_hour"`
	BurstSize          uint32  `yaml:"burst_size"`
	Enabled            *bool   `yaml:"enabled"`
	LocalAllowance     float64 `yaml:"local_allowance"`
	SyncIntervalMs     uint32  `yaml:"sync_interval_ms"`
	RedisTimeoutMs     uint32  `yaml:"redis_timeout_ms"`
	CacheTTLMs         uint32  `yaml:"cache_ttl_ms"`
	OnStoreUnavailable string  `yaml:"on_store_unavailable"`
}

// TokenLimitsSpec is a target's token budget, charged from the usage a
// response reports. Every non-zero window applies.
type TokenLimitsSpec struct {
	Algorithm       string `yaml:"algorithm"`
	TokensPerMinute uint32 `yaml:"tokens_per_minute"`
	TokensPerHour   uint32 `yaml:"tokens_per_hour"`
	TokensPerDay    uint32 `yaml:"tokens_per_day"`
}

// RetryConfigSpec is a target's retry policy.
type RetryConfigSpec struct {
	NumRetries uint32  `yaml:"num_retries"`
	MaxDelayS  float64 `yaml:"max_delay_s"`
	Profile    string  `yaml:"profile"` // standard (default) or interactive
}

// schemaKeys maps each yaml key of a schema struct to its field's index.
type schemaKeys map[string][]int

var schemaCache sync.Map // reflect.Type → schemaKeys

// keysOf returns the yaml keys of struct type t, inline fields' keys
// included. A field without a yaml name has no key.
func keysOf(t reflect.Type) schemaKeys {
	if k, ok := schemaCache.Load(t); ok {
		return k.(schemaKeys)
	}
	keys := schemaKeys{}
	addKeys(keys, t, nil)
	schemaCache.Store(t, keys)
	return keys
}

func addKeys(keys schemaKeys, t reflect.Type, at []int) {
	for i := range t.NumField() {
		f := t.Field(i)
		idx := append(at[:len(at):len(at)], i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			addKeys(keys, f.Type, idx)
		case name != "" && name != "-":
			keys[name] = idx
		}
	}
}

// hooks decode, by yaml key, the fields of a block that are not plain
// scalars or that have rules of their own.
type hooks map[string]func(field)

// decode decodes fs, in file order, into the schema struct dst points to.
// A key is known when dst's type has a field with that yaml tag: its hook
// decodes it if it has one, else b decodes the value by the field's type.
// Any other key is an unknown-key warning. A hook for a key the schema
// lacks is reported as an error: it is a decoder bug, caught by any test
// that decodes the block.
func (b *block) decode(fs []field, dst any, h hooks) {
	v := reflect.ValueOf(dst).Elem()
	keys := keysOf(v.Type())
	for k := range h {
		if keys[k] == nil {
			b.d.errorf(nil, "", "internal error: the decoder reads %q, which %s lacks", k, v.Type().Name())
		}
	}
	for _, f := range fs {
		idx, ok := keys[f.key]
		switch {
		case !ok:
			b.unknown(f)
		case h[f.key] != nil:
			h[f.key](f)
		default:
			b.scalar(f, v.FieldByIndex(idx).Addr().Interface())
		}
	}
}

// scalar decodes f into dst by dst's type.
func (b *block) scalar(f field, dst any) {
	switch p := dst.(type) {
	case *string:
		b.str(f, p)
	case *bool:
		b.boolean(f, p)
	case **bool:
		*p = new(bool)
		b.boolean(f, *p)
	case *uint32:
		b.uint32(f, p)
	case *float64:
		b.float(f, p)
	case *time.Duration:
		b.duration(f, p)
	default:
		b.fail(f, fmt.Errorf("internal error: %s is a %T, which the decoder has no hook for", f.key, dst))
	}
}
