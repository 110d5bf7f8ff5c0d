package policy

import "time"

// The types below document the two file kinds the package reads. They
// carry yaml tags naming each field as it appears in a file. The parser
// walks the YAML tree itself (to report paths and to drop only the bad
// block), so these types have no custom unmarshalling.

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
	Provider       string           `yaml:"provider"`
	APIHost        string           `yaml:"api_host"`
	Cluster        string           `yaml:"cluster"` // default: the target name
	Model          string           `yaml:"model"`   // default: the target name
	ContextWindow  uint32           `yaml:"context_window"`
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
