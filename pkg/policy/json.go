package policy

import (
	"encoding/json"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// The JSON form of a snapshot, for /debug/config. Field names follow the
// policy files; durations are Go duration strings.

type snapshotJSON struct {
	Version  string                `json:"version"`
	Files    []FileStatus          `json:"files"`
	Domains  map[string][]nodeJSON `json:"domains"`
	Targets  []targetJSON          `json:"targets"`
	Problems []Problem             `json:"problems"`
	Options  *LoadOptions          `json:"options,omitempty"`
}

type nodeJSON struct {
	Key            string     `json:"key"`
	Value          string     `json:"value,omitempty"`
	ShareThreshold bool       `json:"share_threshold,omitempty"`
	ValueToMetric  bool       `json:"value_to_metric,omitempty"`
	RateLimit      *limitJSON `json:"rate_limit,omitempty"`
	Descriptors    []nodeJSON `json:"descriptors,omitempty"`
}

type limitJSON struct {
	*Limit
	Rule *ruleJSON `json:"rule,omitempty"`
}

type ruleJSON struct {
	Algorithm          string       `json:"algorithm"`
	Windows            []windowJSON `json:"windows"`
	AlwaysCharge       bool         `json:"always_charge,omitempty"`
	LocalAllowance     float64      `json:"local_allowance,omitempty"`
	SyncInterval       string       `json:"sync_interval,omitempty"`
	RedisTimeout       string       `json:"redis_timeout,omitempty"`
	CacheTTL           string       `json:"cache_ttl,omitempty"`
	OnStoreUnavailable string       `json:"on_store_unavailable"`
	Fingerprint        string       `json:"fingerprint"`
}

type windowJSON struct {
	Limit  uint64 `json:"limit"`
	Period string `json:"period"`
	Burst  uint64 `json:"burst,omitempty"`
}

type targetJSON struct {
	*Target
	RateLimit  *ruleJSON `json:"rate_limits,omitempty"`
	TokenLimit *ruleJSON `json:"token_limits,omitempty"`
}

// MarshalJSON renders the snapshot for operators: files, domain trees,
// targets and problems.
func (s *Snapshot) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	out := snapshotJSON{Version: s.version, Files: s.files, Domains: map[string][]nodeJSON{},
		Targets: []targetJSON{}, Problems: s.problems}
	for name, root := range s.domains {
		out.Domains[name] = nodesJSON(root.order)
	}
	for _, t := range s.list {
		out.Targets = append(out.Targets, targetJSON{Target: t, RateLimit: rule(t.RateLimit), TokenLimit: rule(t.TokenLimit)})
	}
	if s.opts != (LoadOptions{}) {
		out.Options = &s.opts
	}
	if out.Files == nil {
		out.Files = []FileStatus{}
	}
	if out.Problems == nil {
		out.Problems = []Problem{}
	}
	return json.Marshal(out)
}

func nodesJSON(ns []*Node) []nodeJSON {
	out := make([]nodeJSON, 0, len(ns))
	for _, n := range ns {
		j := nodeJSON{Key: n.key, Value: n.value, ShareThreshold: n.share, ValueToMetric: n.valueToMetric, Descriptors: nodesJSON(n.order)}
		if n.limit != nil {
			j.RateLimit = &limitJSON{Limit: n.limit, Rule: rule(n.limit.Rule)}
		}
		out = append(out, j)
	}
	return out
}

func rule(r *limiter.Rule) *ruleJSON {
	if r == nil {
		return nil
	}
	j := &ruleJSON{
		Algorithm: r.Algorithm.String(), AlwaysCharge: r.AlwaysCharge,
		LocalAllowance: r.Tuning.LocalAllowance, OnStoreUnavailable: "static",
		SyncInterval: dur(r.Tuning.SyncInterval), RedisTimeout: dur(r.Tuning.StoreTimeout),
		CacheTTL: dur(r.Tuning.CacheTTL), Fingerprint: r.Fingerprint(),
	}
	if r.Tuning.OnStoreUnavailable == limiter.FailOpen {
		j.OnStoreUnavailable = "allow"
	}
	for _, w := range r.Windows {
		j.Windows = append(j.Windows, windowJSON{Limit: w.Limit, Period: w.Period.String(), Burst: w.Burst})
	}
	return j
}

func dur(d interface{ String() string }) string {
	if s := d.String(); s != "0s" {
		return s
	}
	return ""
}
