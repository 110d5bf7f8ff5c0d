package policy

import (
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// maxFallbacks bounds a target's fallback list.
const maxFallbacks = 5

// maxRetries bounds num_retries.
const maxRetries = 10

// StreamUsageInject is the stream_usage that injects usage requests.
const StreamUsageInject = "inject"

// Target is one compiled target. It is immutable once in a Snapshot.
type Target struct {
	Name     string `json:"name"`
	Provider string `json:"provider,omitempty"`
	APIHost  string `json:"api_host,omitempty"`
	// Cluster is the Envoy cluster serving the target (default: Name).
	Cluster string `json:"cluster"`
	// Model is written into a request body this target serves (default: Name).
	Model         string `json:"model"`
	ContextWindow uint32 `json:"context_window,omitempty"`
	// DefaultMaxTokens is the output a token estimate assumes for a
	// request that sets no max_tokens; zero: none.
	DefaultMaxTokens uint32 `json:"default_max_tokens,omitempty"`
	// StreamUsage "inject" asks a streamed OpenAI-style request for its
	// usage (stream_options.include_usage); "" leaves requests as sent.
	StreamUsage string `json:"stream_usage,omitempty"`
	// RateLimit holds one window per non-zero requests_per_second,
	// _minute and _hour; nil when none is set or enabled is false.
	RateLimit *limiter.Rule `json:"-"`
	// TokenLimit is charged from response usage (AlwaysCharge set); nil
	// when token_limits is absent or all zero.
	TokenLimit *limiter.Rule `json:"-"`
	// MaxConcurrent caps in-flight requests; zero means no cap.
	MaxConcurrent uint32 `json:"max_concurrent,omitempty"`
	// Retry is nil when retry_config is absent or was dropped.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Fallbacks are known target names, at most 5, never Name itself.
	Fallbacks []string `json:"fallbacks,omitempty"`
	// File is the policy file the target came from.
	File string `json:"file"`

	rawFallbacks []string
	fallbackPath string
}

// RetryPolicy is a target's compiled retry_config.
type RetryPolicy struct {
	// NumRetries is at most 10.
	NumRetries uint32 `json:"num_retries"`
	// MaxDelay caps one backoff wait; default 10 s.
	MaxDelay time.Duration `json:"max_delay"`
	// Profile is "standard" (default) or "interactive".
	Profile string `json:"profile"`
}

// decodeTargets reads the top-level targets map.
func (d *decoder) decodeTargets(f field) []*Target {
	fs, ok := d.fields(f.node, f.path, "targets dropped")
	if !ok {
		return nil
	}
	var out []*Target
	for _, tf := range fs {
		if tf.key == "" {
			d.errorf(tf.node, tf.path, "target name is empty (target dropped)")
			continue
		}
		if t := d.decodeTarget(tf); t != nil {
			out = append(out, t)
		}
	}
	return out
}

// decodeTarget reads one target. A bad scalar field is ignored alone and a
// bad block (rate_limits, retry_config…) is dropped alone: the target
// survives anything but not being a mapping.
func (d *decoder) decodeTarget(tf field) *Target {
	fs, ok := d.fields(tf.node, tf.path, "target dropped")
	if !ok {
		return nil
	}
	t := &Target{Name: tf.key, File: d.file}
	var s TargetSpec
	b := newBlock(d, "value ignored")
	b.decode(fs, &s, hooks{
		"stream_usage":    func(f field) { t.StreamUsage = b.streamUsage(f) },
		"rate_limits":     func(f field) { t.RateLimit = d.decodeRateLimits(f) },
		"token_limits":    func(f field) { t.TokenLimit = d.decodeTokenLimits(f) },
		"retry_config":    func(f field) { t.Retry = d.decodeRetry(f) },
		"fallback_models": func(f field) { t.rawFallbacks, t.fallbackPath = d.decodeNames(f), f.path },
	})
	t.Provider, t.APIHost, t.Cluster, t.Model = s.Provider, s.APIHost, s.Cluster, s.Model
	t.ContextWindow, t.DefaultMaxTokens, t.MaxConcurrent = s.ContextWindow, s.DefaultMaxTokens, s.MaxConcurrent
	if t.Cluster == "" {
		t.Cluster = t.Name
	}
	if t.Model == "" {
		t.Model = t.Name
	}
	return t
}

// streamUsage reads stream_usage: inject, or off (""); anything else is
// ignored with an error.
func (b *block) streamUsage(f field) string {
	var v string
	b.str(f, &v)
	switch v {
	case StreamUsageInject:
		return v
	case "", "off":
		return ""
	}
	b.failf(f.node, f.path, "%q: want inject or off", v)
	return ""
}

// decodeNames reads a list of names; bad entries are dropped alone.
func (d *decoder) decodeNames(f field) []string {
	items, ok := d.sequence(f.node, f.path, "fallback_models dropped")
	if !ok {
		return nil
	}
	var out []string
	for i, it := range items {
		s, err := d.str(it)
		if err != nil || s == "" {
			if err == nil {
				d.errorf(it, index(f.path, i), "empty name (entry dropped)")
			} else {
				d.errorf(it, index(f.path, i), "%v (entry dropped)", err)
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

func (d *decoder) decodeRetry(f field) *RetryPolicy {
	fs, ok := d.fields(f.node, f.path, "retry_config dropped")
	if !ok {
		return nil
	}
	var s RetryConfigSpec
	b := newBlock(d, "retry_config dropped")
	b.decode(fs, &s, nil)
	return d.checkRetry(b, f, &s)
}

func (d *decoder) checkRetry(b *block, f field, s *RetryConfigSpec) *RetryPolicy {
	switch s.Profile {
	case "":
		s.Profile = "standard"
	case "standard", "interactive":
	default:
		b.failf(f.node, join(f.path, "profile"), "unknown profile %q (want standard or interactive)", s.Profile)
	}
	if s.MaxDelayS > 3600 {
		b.failf(f.node, join(f.path, "max_delay_s"), "max_delay_s above 3600")
	}
	if b.bad {
		return nil
	}
	if s.NumRetries > maxRetries {
		d.warnf(f.node, join(f.path, "num_retries"), "num_retries %d above %d; using %d", s.NumRetries, maxRetries, maxRetries)
		s.NumRetries = maxRetries
	}
	p := &RetryPolicy{NumRetries: s.NumRetries, Profile: s.Profile, MaxDelay: 10 * time.Second}
	if s.MaxDelayS > 0 {
		p.MaxDelay = time.Duration(s.MaxDelayS * float64(time.Second))
	}
	return p
}

// checkFallbacks validates t's fallback names against the known targets
// and returns the list to keep.
func checkFallbacks(t *Target, known map[string]*Target, add func(sev Severity, path, msg string)) []string {
	raw := t.rawFallbacks
	if len(raw) > maxFallbacks {
		add(Warning, t.fallbackPath, "more than 5 fallback_models; keeping the first 5")
		raw = raw[:maxFallbacks]
	}
	var out []string
	seen := map[string]bool{}
	for i, name := range raw {
		p := index(t.fallbackPath, i)
		switch {
		case name == t.Name:
			add(Warning, p, "a target cannot fall back to itself (entry dropped)")
		case known[name] == nil:
			add(Warning, p, "unknown target "+quote(name)+" (entry dropped)")
		case seen[name]:
			add(Warning, p, "repeated target "+quote(name)+" (entry dropped)")
		default:
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}
