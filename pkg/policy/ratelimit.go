package policy

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// Limit is the compiled rate_limit of one descriptor. It is immutable and
// shared by every snapshot that still holds its file's version.
type Limit struct {
	// Name is the rate_limit name, the target of other limits' replaces.
	Name string `json:"name,omitempty"`
	// Unit and UnitMultiplier (≥ 1) give the window: multiplier × unit.
	Unit            Unit   `json:"unit,omitempty"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	// Unlimited descriptors are never limited; Rule is then nil.
	Unlimited bool `json:"unlimited,omitempty"`
	// ShadowMode: decide and count, but always answer OK.
	ShadowMode bool `json:"shadow_mode,omitempty"`
	// Replaces lists the names of limits this one replaces when both apply.
	Replaces []string `json:"replaces,omitempty"`
	// DetailedMetric asks for per-value metrics on wildcard and key-only
	// matches.
	DetailedMetric bool `json:"detailed_metric,omitempty"`
	// QuotaMode (the descriptor's quota_mode): when this limit is spent its
	// status is OVER_LIMIT, but the request is denied only when every
	// quota-mode descriptor (every model's group of them, for the RLS) of
	// the request is over, or a descriptor not in quota mode is.
	QuotaMode bool `json:"quota_mode,omitempty"`
	// Metadata (the descriptor's metadata) is returned in the response's
	// dynamic metadata when the descriptor passed. Values are string,
	// bool, int64, float64, nil, []any or map[string]any; never modify it.
	Metadata map[string]any `json:"metadata,omitempty"`
	// Rule is what the limiter enforces; nil when Unlimited.
	Rule *limiter.Rule `json:"-"`
	// Charged is Rule with AlwaysCharge set, for charges that must be
	// recorded whatever the verdict (usage reported after a response). It
	// shares Rule's counters: keys carry Fingerprint, not Charged's.
	Charged *limiter.Rule `json:"-"`
	// Fingerprint is Rule.Fingerprint(), computed once.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Path names the limit in logs and metrics: the domain and the
	// configured entries, "domain.key_value.key".
	Path string `json:"path"`
}

// decodeRateLimit reads a rate_limit block; nil when it is dropped.
func (d *decoder) decodeRateLimit(n *yaml.Node, path string) *RateLimitSpec {
	fs, ok := d.fields(n, path, "rate_limit dropped")
	if !ok {
		return nil
	}
	b := newBlock(d, "rate_limit dropped")
	var s RateLimitSpec
	at := map[string]*yaml.Node{"": n}
	for _, f := range fs {
		at[f.key] = f.node
	}
	b.decode(fs, &s, hooks{
		"unit_multiplier": func(f field) {
			if v, err := d.uint32(f.node); err != nil || v == 0 {
				b.failf(f.node, f.path, "unit_multiplier must be an integer ≥ 1")
			} else {
				s.UnitMultiplier = v
			}
		},
		"replaces": func(f field) { s.Replaces = d.decodeReplaces(f) },
		"quota_mode": func(f field) {
			// envoyproxy/ratelimit reads quota_mode on the descriptor,
			// beside shadow_mode; accepted here too.
			b.boolean(f, &s.QuotaMode)
			d.warnf(f.node, f.path, "quota_mode belongs on the descriptor, beside shadow_mode; applied")
		},
	})
	if b.bad || !d.checkRateLimit(b, at, path, &s, s.Unit != "", at["requests_per_unit"] != nil) {
		return nil
	}
	return &s
}

// checkRateLimit applies the rules that span fields; at maps each field
// present to its node ("" to the block), for line numbers.
func (d *decoder) checkRateLimit(b *block, at map[string]*yaml.Node, path string, s *RateLimitSpec, hasUnit, hasRPU bool) bool {
	node := func(key string) *yaml.Node {
		if n := at[key]; n != nil {
			return n
		}
		return at[""]
	}
	fail := func(key, format string, args ...any) { b.failf(node(key), join(path, key), format, args...) }
	if s.Unlimited {
		if hasUnit || hasRPU {
			d.warnf(at[""], path, "unit and requests_per_unit are ignored when unlimited")
		}
		return true
	}
	switch {
	case !hasUnit:
		fail("unit", "unit is required")
	case !hasRPU:
		fail("requests_per_unit", "requests_per_unit is required")
	case s.RequestsPerUnit == 0 && s.Algorithm == "token_bucket":
		// Zero bans every request (envoyproxy/ratelimit's "banned" idiom);
		// a window expresses that, a bucket's refill rate cannot.
		fail("requests_per_unit", "requests_per_unit 0 (deny all) needs fixed_window or sliding_window")
	}
	if _, err := ParseUnit(s.Unit); hasUnit && err != nil {
		fail("unit", "%v", err)
	}
	if _, err := limiter.ParseAlgorithm(s.Algorithm); err != nil {
		fail("algorithm", "%v", err)
	}
	if _, err := parseFailMode(s.OnStoreUnavailable); err != nil {
		fail("on_store_unavailable", "%v", err)
	}
	s.Replaces = d.dropSelfReplace(node("replaces"), path, s)
	if s.Burst > 0 && s.Algorithm != "token_bucket" && !b.bad {
		d.warnf(node("burst"), join(path, "burst"), "burst applies to token_bucket only; ignored")
		s.Burst = 0
	}
	return !b.bad
}

// decodeReplaces reads [{name: x}, …]; a bad entry is dropped alone.
func (d *decoder) decodeReplaces(f field) []ReplacesSpec {
	items, ok := d.sequence(f.node, f.path, "replaces dropped")
	if !ok {
		return nil
	}
	var out []ReplacesSpec
	for i, it := range items {
		p := index(f.path, i)
		fs, ok := d.fields(it, p, "replaces entry dropped")
		if !ok {
			continue
		}
		var r ReplacesSpec
		newBlock(d, "replaces entry dropped").decode(fs, &r, nil)
		if r.Name == "" {
			d.errorf(it, p, "replaces entry needs a name (entry dropped)")
			continue
		}
		out = append(out, r)
	}
	return out
}

// dropSelfReplace removes a replaces entry naming the limit itself.
func (d *decoder) dropSelfReplace(n *yaml.Node, path string, s *RateLimitSpec) []ReplacesSpec {
	out := s.Replaces[:0:0]
	for _, r := range s.Replaces {
		if r.Name == s.Name {
			d.errorf(n, join(path, "replaces"), "a limit cannot replace itself (%q dropped from replaces)", r.Name)
			continue
		}
		out = append(out, r)
	}
	return out
}

func parseFailMode(s string) (limiter.FailMode, error) {
	switch s {
	case "", "static":
		return limiter.FailStatic, nil
	case "allow":
		return limiter.FailOpen, nil
	}
	return 0, fmt.Errorf("unknown on_store_unavailable %q (want static or allow)", s)
}

// compileLimit turns a checked spec into a Limit. It fails only when the
// limiter rejects the rule (limits too large, rate too high).
func compileLimit(s *RateLimitSpec, path string, f limitFlags) (*Limit, error) {
	l := &Limit{
		Name: s.Name, Unlimited: s.Unlimited, ShadowMode: f.shadow,
		DetailedMetric: f.detailed, QuotaMode: f.quota, Metadata: f.metadata, Path: path,
	}
	for _, r := range s.Replaces {
		l.Replaces = append(l.Replaces, r.Name)
	}
	if s.Unlimited {
		return l, nil
	}
	l.Unit, _ = ParseUnit(s.Unit)
	l.RequestsPerUnit = s.RequestsPerUnit
	l.UnitMultiplier = max(s.UnitMultiplier, 1)
	period, err := windowPeriod(l.Unit, l.UnitMultiplier)
	if err != nil {
		return nil, err
	}
	alg, _ := limiter.ParseAlgorithm(s.Algorithm)
	mode, _ := parseFailMode(s.OnStoreUnavailable)
	r := &limiter.Rule{
		Name:         s.Name,
		Algorithm:    alg,
		Windows:      []limiter.Window{{Limit: uint64(s.RequestsPerUnit), Period: period, Burst: uint64(s.Burst)}},
		AlwaysCharge: s.AlwaysCharge,
		Tuning: limiter.Tuning{
			LocalAllowance: s.LocalAllowance, SyncInterval: s.SyncInterval,
			StoreTimeout: s.RedisTimeout, CacheTTL: s.CacheTTL, OnStoreUnavailable: mode,
		},
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	l.Rule, l.Fingerprint = r, r.Fingerprint()
	l.Charged = ChargedRule(r)
	return l, nil
}

// ChargedRule returns r with AlwaysCharge set (r itself when it has it):
// the rule to decide a charge that must be recorded whatever the verdict,
// on r's own counters.
func ChargedRule(r *limiter.Rule) *limiter.Rule {
	if r == nil || r.AlwaysCharge {
		return r
	}
	c := *r
	c.AlwaysCharge = true
	return &c
}
