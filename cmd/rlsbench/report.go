package main

import (
	"encoding/json"
	"io"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
)

// report is the summary of a run, printed as text or JSON. Its JSON
// field names are a stable interface for scripts.
type report struct {
	Config          reportConfig      `json:"config"`
	Started         time.Time         `json:"started"`
	DurationSeconds float64           `json:"duration_seconds"`
	Interrupted     bool              `json:"interrupted"`
	Requests        uint64            `json:"requests"`
	ThroughputRPS   float64           `json:"throughput_rps"`
	OK              uint64            `json:"ok"`
	OverLimit       uint64            `json:"over_limit"`
	Errors          uint64            `json:"errors"`
	ErrorsByCode    map[string]uint64 `json:"errors_by_code"`
	Malformed       uint64            `json:"malformed"`
	Latency         latencyReport     `json:"latency_us"`
	PerAddress      []addrStats       `json:"per_address"`
	Accuracy        accuracyReport    `json:"accuracy"`
	CPU             []cpuUsage        `json:"cpu"`
}

type reportConfig struct {
	Addrs           []string `json:"addrs"`
	Conns           int      `json:"conns_per_addr"`
	Domain          string   `json:"domain"`
	Descriptor      string   `json:"descriptor"`
	Keys            int      `json:"keys"`
	Zipf            float64  `json:"zipf"`
	Seed            uint64   `json:"seed"`
	Hits            uint32   `json:"hits"`
	Concurrency     int      `json:"concurrency"`
	DurationSeconds float64  `json:"duration_seconds"`
	Count           int64    `json:"count"`
	Rate            float64  `json:"rate"`
	TimeoutSeconds  float64  `json:"timeout_seconds"`
}

// latencyReport is in microseconds and covers answered requests (OK or
// OVER_LIMIT); failed calls are left out.
type latencyReport struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// accuracyReport sums up the per-second, per-key tallies.
type accuracyReport struct {
	Offered  uint64 `json:"offered"`
	Admitted uint64 `json:"admitted"`
	// MaxKeyAdmitted is the most requests admitted for one key in one
	// second, MaxKey that key and MaxKeyUnix that second.
	MaxKeyAdmitted uint64      `json:"max_key_admitted_per_second"`
	MaxKey         string      `json:"max_key"`
	MaxKeyIndex    int         `json:"max_key_index"`
	MaxKeyUnix     int64       `json:"max_key_unix"`
	Seconds        []secondRow `json:"seconds"`
	// Limit is the outcome of -limit, absent without it.
	Limit *limitReport `json:"limit,omitempty"`
}

func newReport(r *runResult) *report {
	rep := &report{
		Config:          configReport(r.cfg),
		Started:         r.start.UTC(),
		DurationSeconds: r.elapsed.Seconds(),
		Interrupted:     r.interrupted,
		ErrorsByCode:    map[string]uint64{},
		CPU:             r.cpu,
	}
	var hist histogram
	var byCode [numCodes]uint64
	for _, w := range r.workers {
		hist.merge(&w.hist)
		rep.OK += w.ok.Load()
		rep.OverLimit += w.over.Load()
		rep.Errors += w.errs.Load()
		rep.Malformed += w.malformed
		for c, n := range w.codes {
			byCode[c] += n
		}
		rep.PerAddress = mergeAddrStats(rep.PerAddress, w.perAddr)
	}
	for c, n := range byCode {
		if n > 0 {
			rep.ErrorsByCode[codes.Code(c).String()] = n
		}
	}
	rep.Requests = rep.OK + rep.OverLimit + rep.Errors
	if r.elapsed > 0 {
		rep.ThroughputRPS = float64(rep.Requests) / r.elapsed.Seconds()
	}
	rep.Latency = latencyOf(&hist)
	rep.Accuracy = accuracyOf(r.rows, r.limit, r.tmpl)
	return rep
}

func configReport(c benchConfig) reportConfig {
	return reportConfig{
		Addrs:           c.addrs,
		Conns:           c.conns,
		Domain:          c.domain,
		Descriptor:      c.descriptor,
		Keys:            c.keys,
		Zipf:            c.zipf,
		Seed:            c.seed,
		Hits:            c.hits,
		Concurrency:     c.concurrency,
		DurationSeconds: c.duration.Seconds(),
		Count:           c.count,
		Rate:            c.rate,
		TimeoutSeconds:  c.timeout.Seconds(),
	}
}

func mergeAddrStats(into, from []addrStats) []addrStats {
	if into == nil {
		return slices.Clone(from)
	}
	for i, s := range from {
		into[i].Requests += s.Requests
		into[i].OK += s.OK
		into[i].OverLimit += s.OverLimit
		into[i].Errors += s.Errors
	}
	return into
}

func latencyOf(h *histogram) latencyReport {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return latencyReport{
		Count: h.total,
		Min:   us(time.Duration(h.min)),
		Mean:  us(h.mean()),
		P50:   us(h.quantile(0.50)),
		P90:   us(h.quantile(0.90)),
		P99:   us(h.quantile(0.99)),
		Max:   us(time.Duration(h.max)),
	}
}

func accuracyOf(rows []secondRow, limit *limitReport, tmpl *requestTemplate) accuracyReport {
	a := accuracyReport{Seconds: rows, MaxKeyIndex: -1, Limit: limit}
	if limit != nil && limit.MaxKeyIndex >= 0 {
		limit.MaxKey = tmpl.keyName(limit.MaxKeyIndex)
	}
	if limit != nil && limit.SurelyOverKeyIndex >= 0 {
		limit.SurelyOverKey = tmpl.keyName(limit.SurelyOverKeyIndex)
	}
	if a.Seconds == nil {
		a.Seconds = []secondRow{}
	}
	for _, r := range rows {
		a.Offered += r.Offered
		a.Admitted += r.Admitted
		if r.MaxKey >= 0 && (a.MaxKeyIndex < 0 || r.MaxKeyAdmitted > a.MaxKeyAdmitted) {
			a.MaxKeyAdmitted, a.MaxKeyIndex, a.MaxKeyUnix = r.MaxKeyAdmitted, r.MaxKey, r.Unix
		}
	}
	if a.MaxKeyIndex >= 0 {
		a.MaxKey = tmpl.keyName(a.MaxKeyIndex)
	}
	return a
}

// sortedCodes returns the error code names in a stable order.
func (r *report) sortedCodes() []string {
	return slices.Sorted(maps.Keys(r.ErrorsByCode))
}

func writeJSON(w io.Writer, r *report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
