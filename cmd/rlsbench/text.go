package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// maxTextSeconds is how many per-second rows the text report shows in
// full; longer runs show the first and last rows only (-json has all).
const maxTextSeconds = 30

// writeText prints r for people. Each section aligns its own columns.
func writeText(w io.Writer, r *report) error {
	for _, section := range []func(io.Writer, *report){writeSummary, writeAddresses, writeAccuracy, writeLimit, writeCPU} {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		section(tw, r)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func writeSummary(w io.Writer, r *report) {
	c := r.Config
	keys := "in turn"
	if c.Zipf > 0 {
		keys = fmt.Sprintf("Zipf s=%g, seed %d", c.Zipf, c.Seed)
	}
	fmt.Fprintf(w, "target\t%s (%d conn each)  domain %s  descriptor %s  keys %d (%s)  hits %d\n",
		strings.Join(c.Addrs, ","), c.Conns, c.Domain, c.Descriptor, c.Keys, keys, c.Hits)
	mode := "closed loop"
	if c.Rate > 0 {
		mode = fmt.Sprintf("open loop at %g req/s (latency from scheduled send)", c.Rate)
	}
	fmt.Fprintf(w, "load\tc=%d  %s\n", c.Concurrency, mode)
	stop := ""
	if r.Interrupted {
		stop = "  (interrupted)"
	}
	fmt.Fprintf(w, "requests\t%d in %s  =  %.1f req/s%s\n",
		r.Requests, fmtDur(secondsDur(r.DurationSeconds)), r.ThroughputRPS, stop)
	fmt.Fprintf(w, "answers\tok %d  over_limit %d  errors %d", r.OK, r.OverLimit, r.Errors)
	if r.Malformed > 0 {
		fmt.Fprintf(w, "  (malformed answers counted as ok: %d)", r.Malformed)
	}
	fmt.Fprintln(w)
	if len(r.ErrorsByCode) > 0 {
		var parts []string
		for _, code := range r.sortedCodes() {
			parts = append(parts, fmt.Sprintf("%s %d", code, r.ErrorsByCode[code]))
		}
		fmt.Fprintf(w, "errors\t%s\n", strings.Join(parts, "  "))
	}
	l := r.Latency
	if l.Count == 0 {
		fmt.Fprintf(w, "latency\tno answered requests\n")
		return
	}
	fmt.Fprintf(w, "latency\tp50 %s  p90 %s  p99 %s  max %s  (min %s, mean %s, over %d answers)\n",
		fmtUs(l.P50), fmtUs(l.P90), fmtUs(l.P99), fmtUs(l.Max), fmtUs(l.Min), fmtUs(l.Mean), l.Count)
}

func writeAddresses(w io.Writer, r *report) {
	if len(r.PerAddress) < 2 {
		return
	}
	fmt.Fprintln(w, "addresses")
	for _, a := range r.PerAddress {
		fmt.Fprintf(w, "  %s\trequests %d\tok %d\tover_limit %d\terrors %d\n",
			a.Addr, a.Requests, a.OK, a.OverLimit, a.Errors)
	}
}

func writeAccuracy(w io.Writer, r *report) {
	a := r.Accuracy
	fmt.Fprintf(w, "accuracy: admitted (OK) / offered, per Unix second of send: %d / %d in all\n", a.Admitted, a.Offered)
	if len(a.Seconds) == 0 {
		return
	}
	fmt.Fprintln(w, "  second\tunix\toffered\tadmitted\tover_limit\tkeys\tmax admitted by one key")
	rows := a.Seconds
	skipped := 0
	if len(rows) > maxTextSeconds {
		skipped = len(rows) - maxTextSeconds
	}
	for i, row := range rows {
		if skipped > 0 && i == maxTextSeconds/2 {
			fmt.Fprintf(w, "  ...\t%d seconds not shown (see -json)\t\t\t\t\t\n", skipped)
		}
		if skipped > 0 && i >= maxTextSeconds/2 && i < maxTextSeconds/2+skipped {
			continue
		}
		fmt.Fprintf(w, "  +%d\t%d\t%d\t%d\t%d\t%d\t%d\n",
			row.Offset, row.Unix, row.Offered, row.Admitted, row.OverLimit, row.Keys, row.MaxKeyAdmitted)
	}
	if a.MaxKeyIndex >= 0 {
		fmt.Fprintf(w, "  max admitted for one key in one second: %d (%s, unix %d)\n",
			a.MaxKeyAdmitted, a.MaxKey, a.MaxKeyUnix)
	}
}

func writeLimit(w io.Writer, r *report) {
	l := r.Accuracy.Limit
	if l == nil {
		return
	}
	fmt.Fprintf(w, "limit: %d per key per %s (Unix-aligned windows, by send time, all addresses)\n", l.Limit, windowName(l.WindowSeconds))
	fmt.Fprintf(w, "  keys with traffic\t%d\tin %d key-windows; sent more than %d in some window: %d\n",
		l.Keys, l.KeyWindows, l.Limit, l.KeysOfferedOverLimit)
	fmt.Fprintf(w, "  keys over limit\t%d\tadmitted more than %d in %d key-windows, %d beyond the limit in all\n",
		l.KeysOverLimit, l.Limit, l.KeyWindowsOverLimit, l.AdmittedOverLimit)
	fmt.Fprintf(w, "  keys denied under limit\t%d\tdenied in %d key-windows sent at most %d, %d OVER_LIMIT answers in them\n",
		l.KeysDeniedUnderLimit, l.KeyWindowsDeniedUnderLimit, l.Limit, l.DeniedUnderLimit)
	fmt.Fprintf(w, "  surely over limit\t%d\tkeys, in %d key-windows, %d beyond the limit (answered in the window they were sent in)\n",
		l.KeysSurelyOver, l.KeyWindowsSurelyOver, l.SurelyAdmittedOver)
	if l.SurelyOverKeyIndex >= 0 {
		fmt.Fprintf(w, "    the first: %s admitted %d in the window from unix %d\n", l.SurelyOverKey, l.SurelyOverAdmitted, l.SurelyOverWindow)
	}
	fmt.Fprintf(w, "  surely denied under limit\t%d\tkeys, in %d key-windows, %d OVER_LIMIT answers (windows that saw at most %d even counting late answers)\n",
		l.KeysSurelyDeniedUnder, l.KeyWindowsSurelyDeniedUnder, l.SurelyDeniedUnder, l.Limit)
	if by := l.SurelyDeniedUnderByLatency; l.SurelyDeniedUnder > 0 {
		fmt.Fprintf(w, "    by latency: %d under 5 ms, %d from 5 to 190 ms, %d at 190 ms or more\n", by[0], by[1], by[2])
	}
	if l.MaxKeyIndex >= 0 {
		fmt.Fprintf(w, "  max admitted for one key in one window: %d (%s, window from unix %d)\n", l.MaxAdmitted, l.MaxKey, l.MaxWindowUnix)
	}
}

// windowName names a -per window by its length.
func windowName(seconds int64) string {
	for name, s := range windows {
		if s == seconds {
			return name
		}
	}
	return fmt.Sprintf("%d s", seconds)
}

func writeCPU(w io.Writer, r *report) {
	if len(r.CPU) == 0 {
		return
	}
	fmt.Fprintln(w, "cpu: user+system time over the run")
	for _, u := range r.CPU {
		name := fmt.Sprintf("pid %d", u.PID)
		if u.Label != "" {
			name = fmt.Sprintf("%s (pid %d)", u.Label, u.PID)
		}
		if u.Error != "" {
			fmt.Fprintf(w, "  %s\t%s\n", name, u.Error)
			continue
		}
		fmt.Fprintf(w, "  %s\t%.2f s\t%.3f s per 100k requests\n", name, u.Seconds, u.Per100k)
	}
}

func secondsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func fmtUs(us float64) string { return fmtDur(time.Duration(us * float64(time.Microsecond))) }

// fmtDur prints d with about three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", int64(d))
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
}
