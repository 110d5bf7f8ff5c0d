package deploy_test

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// metricLabels lists the series /metrics exposes that dashboards may use,
// with their labels. Prometheus adds job and instance to every series.
var metricLabels = map[string][]string{
	"ratelimit_decisions_total":        {"domain", "outcome", "mode"},
	"ratelimit_requests_total":         {"domain", "code"},
	"ratelimit_config_reloads_total":   {"result"},
	"ratelimit_engine_decisions_total": {"mode"},
	"ratelimit_sync_round_trips_total": nil,
	"ratelimit_sync_failures_total":    nil,
	"ratelimit_replicas":               nil,
	"extproc_verdicts_total":           {"role", "outcome", "class"},
	"breaker_transitions_total":        {"tier", "name", "from", "to"},
	// Go and process collectors.
	"go_goroutines":                 nil,
	"go_memstats_heap_alloc_bytes":  nil,
	"process_cpu_seconds_total":     nil,
	"process_resident_memory_bytes": nil,
}

var (
	// metricRe finds series names: the project's and the collectors'.
	metricRe = regexp.MustCompile(`\b(?:ratelimit|extproc|breaker|go|process)_[a-z0-9_]+\b`)
	// selectorRe finds name{matchers}.
	selectorRe = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"`)
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	labelFnRe  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_]+)\s*\)`)
)

// checkPromQL checks that an expression uses only known series, and only
// their labels in matchers and groupings.
func checkPromQL(errorf func(string, ...any), where, expr string) {
	names := metricRe.FindAllString(expr, -1)
	if len(names) == 0 {
		errorf("%s: %q uses no ratelimit-svc series", where, expr)
	}
	allowed := map[string]bool{"job": true, "instance": true}
	for _, n := range names {
		labels, ok := metricLabels[n]
		if !ok {
			errorf("%s: %q: unknown series %s", where, expr, n)
		}
		for _, l := range labels {
			allowed[l] = true
		}
	}
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		own := map[string]bool{"job": true, "instance": true}
		for _, l := range metricLabels[m[1]] {
			own[l] = true
		}
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			if !own[mm[1]] {
				errorf("%s: %s has no label %q", where, m[1], mm[1])
			}
		}
	}
	for _, g := range groupingRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !allowed[l] {
				errorf("%s: groups by %q, which none of %v has", where, l, names)
			}
		}
	}
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
		errorf("%s: unbalanced %q", where, expr)
	}
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func TestDashboard(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(readFile(t, "deploy", "grafana", "ratelimit.json"), &d); err != nil {
		t.Fatalf("ratelimit.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard without uid or title")
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			json.Unmarshal(v.Query, &q.Query)
		}
		m := labelFnRe.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(series, label)", v.Name, q.Query)
			continue
		}
		if labels, ok := metricLabels[m[1]]; !ok || (!slices.Contains(labels, m[2]) && m[2] != "instance" && m[2] != "job") {
			t.Errorf("variable %s: %s has no label %s", v.Name, m[1], m[2])
		}
	}

	used := map[string]bool{}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the datasource variable", p.Title)
			}
			for _, tg := range p.Targets {
				where := "panel " + p.Title + " " + tg.RefID
				checkPromQL(t.Errorf, where, tg.Expr)
				for _, n := range metricRe.FindAllString(tg.Expr, -1) {
					used[n] = true
				}
				for _, m := range regexp.MustCompile(`\$\{?([a-zA-Z_]+)`).FindAllStringSubmatch(tg.Expr, -1) {
					if !vars[m[1]] {
						t.Errorf("%s: unknown variable $%s", where, m[1])
					}
				}
			}
		}
	}
	walk(d.Panels)

	// Every project series has a panel.
	for _, n := range slices.Sorted(maps.Keys(metricLabels)) {
		if !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") && !used[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}

// TestCheckPromQL makes sure the checker catches what it should.
func TestCheckPromQL(t *testing.T) {
	for _, bad := range []string{
		`rate(ratelimit_decision_total[5m])`,
		`sum by (tier) (rate(ratelimit_decisions_total[5m]))`,
		`ratelimit_replicas{domain="api"}`,
		`sum(rate(up[5m]))`,
		`sum(rate(ratelimit_requests_total[5m])`,
	} {
		failed := false
		checkPromQL(func(string, ...any) { failed = true }, "test", bad)
		if !failed {
			t.Errorf("%q passed", bad)
		}
	}
}
