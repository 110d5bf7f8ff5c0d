package policy

import (
	"encoding/json"
	"testing"
)

func TestSnapshotJSON(t *testing.T) {
	s, err := Load("../../config")
	must(t, err)
	b, err := json.Marshal(s)
	must(t, err)
	var got struct {
		Version string
		Files   []FileStatus
		Domains map[string][]struct {
			Key       string
			Value     string
			RateLimit *struct {
				Path string
				Rule *struct{ Algorithm string }
			} `json:"rate_limit"`
		}
		Targets []struct {
			Name       string
			RateLimits *struct{ Windows []struct{ Period string } } `json:"rate_limits"`
		}
		Problems []Problem
	}
	must(t, json.Unmarshal(b, &got))
	if got.Version != s.Version() || len(got.Files) != 3 || len(got.Domains["api"]) == 0 || len(got.Targets) != 3 || got.Problems == nil {
		t.Fatalf("json: %s", b)
	}
	if rl := got.Domains["api"][1].RateLimit; rl == nil || rl.Path != "api.remote_address" || rl.Rule.Algorithm != "fixed_window" {
		t.Errorf("remote_address: %+v", got.Domains["api"][1])
	}
	if w := got.Targets[0].RateLimits.Windows; len(w) != 2 || w[0].Period != "1m0s" {
		t.Errorf("claude-sonnet windows %+v", w)
	}
	var empty *Snapshot
	if b, _ := json.Marshal(empty); string(b) != "null" {
		t.Error(string(b))
	}
	if b, _ := json.Marshal(Compile()); string(b) != `{"version":"e3b0c44298fc1c14","files":[],"domains":{},"targets":[],"problems":[]}` {
		t.Error(string(b))
	}
}
