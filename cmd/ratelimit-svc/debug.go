package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// debugEndpoints are the debug listener's paths and what they show, listed
// on its root as envoyproxy/ratelimit does.
var debugEndpoints = map[string]string{
	"/debug/config":        "the policy snapshot in force, where it came from, and every problem found (JSON)",
	"/debug/keys":          "live key state: ?prefix= and ?limit= (at most --debug-keys-max) (JSON)",
	"/debug/pprof/":        "root of the pprof endpoints",
	"/debug/pprof/profile": "CPU profile",
	"/debug/pprof/trace":   "execution trace",
	"/rlconfig":            "the rate limits in force, in envoyproxy/ratelimit's format",
}

// debugRoutes is the debug listener, for operators only (it lists key
// names, which are tenants' data): pprof, the policy snapshot, live keys
// and envoyproxy/ratelimit's /rlconfig.
func (a *app) debugRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/config", a.debugConfig)
	mux.HandleFunc("GET /debug/keys", a.debugKeys)
	mux.Handle("GET /debug/pprof/", a.boundProfile(pprof.Index))
	mux.Handle("GET /debug/pprof/profile", a.boundProfile(pprof.Profile))
	mux.Handle("GET /debug/pprof/trace", a.boundProfile(pprof.Trace))
	mux.HandleFunc("GET /rlconfig", a.rlconfig)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		paths := make([]string, 0, len(debugEndpoints))
		for p := range debugEndpoints {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, p := range paths {
			fmt.Fprintf(w, "%s: %s\n", p, debugEndpoints[p])
		}
	})
	return mux
}

// debugConfig shows the snapshot in force and its source: for xDS
// {"source": the client's status, "config": the snapshot}; for files the
// snapshot's fields, with "source" naming the path.
func (a *app) debugConfig(w http.ResponseWriter, _ *http.Request) {
	snap := a.pol.Current()
	if a.xds != nil {
		writeJSON(w, map[string]any{"source": a.xds.Status(), "config": snap})
		return
	}
	raw, err := json.Marshal(snap)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out["source"], _ = json.Marshal(fileSource{Type: "FILE", Path: a.cfg.ConfigPath})
	writeJSON(w, out)
}

// boundProfile refuses a pprof ?seconds= above --debug-profile-max with
// 400, so that one request cannot hold a profile and its connection for
// hours.
func (a *app) boundProfile(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.URL.Query().Get("seconds"); s != "" {
			sec, err := strconv.ParseFloat(s, 64)
			if max := a.cfg.DebugProfileMax.Seconds(); err == nil && sec > max {
				http.Error(w, fmt.Sprintf("seconds %s is above the maximum %g (--debug-profile-max)", s, max),
					http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	})
}

// fileSource is the source of policies read from files.
type fileSource struct {
	Type string `json:"type"`
	Path string `json:"path"`
}

// debugKeys shows the live state of keys starting with ?prefix= (at most
// ?limit=, default 100, never above --debug-keys-max).
func (a *app) debugKeys(w http.ResponseWriter, r *http.Request) {
	limit := min(100, a.cfg.DebugKeysMax)
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			http.Error(w, "limit must be a positive integer", http.StatusBadRequest)
			return
		}
		if n > a.cfg.DebugKeysMax {
			http.Error(w, fmt.Sprintf("limit %d is above the maximum %d (--debug-keys-max)", n, a.cfg.DebugKeysMax),
				http.StatusBadRequest)
			return
		}
		limit = n
	}
	keys := a.lim.Snapshot(r.URL.Query().Get("prefix"), limit)
	mode := "local"
	if a.lim.Shared() {
		mode = "redis"
	}
	writeJSON(w, map[string]any{"mode": mode, "replica": a.cfg.ReplicaID, "keys": keys, "total_keys": a.lim.Keys(), "engine": a.lim.Stats()})
}

// rlconfig writes the rate limits in force as envoyproxy/ratelimit's
// /rlconfig does (what egctl shows): one line per descriptor with a limit,
// "<domain>.<key>_<value>...: unit=<UNIT> requests_per_unit=<n>,
// shadow_mode: <bool>", domains sorted, descriptors in file order.
func (a *app) rlconfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	writeRLConfig(w, a.pol.Current())
}

func writeRLConfig(w io.Writer, s *policy.Snapshot) {
	var walk func(n *policy.Node)
	walk = func(n *policy.Node) {
		if l := n.Limit(); l != nil {
			fmt.Fprintf(w, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t\n",
				n.Path(), rlUnit(l.Unit), l.RequestsPerUnit, l.ShadowMode)
		}
		for _, c := range n.Children() {
			walk(c)
		}
	}
	for _, d := range s.Domains() {
		walk(s.Domain(d))
	}
}

// rlUnit is a unit's RLS proto name (SECOND, MINUTE, ...; UNKNOWN for an
// unlimited descriptor's missing unit).
func rlUnit(u policy.Unit) string {
	return ratelimitv3.RateLimitResponse_RateLimit_Unit(u).String()
}
