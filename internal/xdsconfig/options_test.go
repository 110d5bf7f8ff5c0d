package xdsconfig

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig/xdstest"
)

func TestParseNodeMetadata(t *testing.T) {
	tests := []struct {
		give    string
		want    map[string]string
		wantErr bool
	}{
		{give: "", want: nil},
		{give: "k1=v1,k2=v2", want: map[string]string{"k1": "v1", "k2": "v2"}},
		{give: " k1 = v1 , ,k2=a=b,", want: map[string]string{"k1": "v1", "k2": "a=b"}},
		{give: "k1=", want: map[string]string{"k1": ""}},
		{give: "k1:v1", wantErr: true},
		{give: "=v", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseNodeMetadata(tt.give)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseNodeMetadata(%q) = %v, %v", tt.give, got, err)
		}
	}
	if got, err := ParseHeaders("x-a:1,x-b: 2"); err != nil || !reflect.DeepEqual(got, map[string]string{"x-a": "1", "x-b": "2"}) {
		t.Errorf("ParseHeaders = %v, %v", got, err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		give Options
		want string // "" for valid
	}{
		{"zero", Options{}, ""},
		{"full", Options{ServerURL: "xds.example:18000", UseTLS: true, ClientCert: "c", ClientKey: "k", CACert: "ca",
			ServerSAN: "xds", InitialInterval: time.Second, MaxInterval: time.Minute, RandomFactor: 1}, ""},
		{"target with scheme", Options{ServerURL: "dns:///xds.example:18000"}, ""},
		{"no port", Options{ServerURL: "xds.example"}, "ServerURL"},
		{"cert without key", Options{UseTLS: true, ClientCert: "c"}, "ClientKey"},
		{"TLS files without TLS", Options{CACert: "ca"}, "need UseTLS"},
		{"negative interval", Options{InitialInterval: -1}, "InitialInterval"},
		{"max below initial", Options{InitialInterval: time.Minute, MaxInterval: time.Second}, "below"},
		{"factor above 1", Options{RandomFactor: 1.5}, "RandomFactor"},
		{"factor NaN", Options{RandomFactor: math.NaN()}, "RandomFactor"},
		{"negative size", Options{MaxRecvMsgSize: -1}, "MaxRecvMsgSize"},
	}
	for _, tt := range tests {
		err := tt.give.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.ServerURL != "localhost:18000" || o.NodeID != "default" || o.InitialInterval != 10*time.Second ||
		o.MaxInterval != 60*time.Second || o.RandomFactor != 0.5 || o.Logger == nil {
		t.Errorf("defaults %+v", o)
	}
	if o := (Options{InitialInterval: 2 * time.Minute}).withDefaults(); o.MaxInterval != 2*time.Minute {
		t.Errorf("max below a large initial interval: %v", o.MaxInterval)
	}
}

func TestNewReadsTheTLSFiles(t *testing.T) {
	p := xdstest.NewPKI(t)
	if _, err := New(Options{UseTLS: true, CACert: p.CAFile, ClientCert: p.ClientCert, ClientKey: p.ClientKey}); err != nil {
		t.Errorf("good files: %v", err)
	}
	for name, o := range map[string]Options{
		"missing CA":    {UseTLS: true, CACert: p.CAFile + ".missing"},
		"CA not PEM":    {UseTLS: true, CACert: p.ClientKey},
		"key mismatch":  {UseTLS: true, ClientCert: p.ClientCert, ClientKey: p.ServerKey},
		"invalid field": {RandomFactor: 2},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestBackoffDelays(t *testing.T) {
	exact := backoff{initial: 10 * time.Second, max: 60 * time.Second}
	var got []time.Duration
	for n := range 6 {
		got = append(got, exact.delay(n))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 60 * time.Second, 60 * time.Second, 60 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("delays %v", got)
	}
	for _, tt := range []struct {
		r    float64
		n    int
		want time.Duration
	}{
		{0, 0, 5 * time.Second},     // 10 s × 0.5
		{0.5, 0, 10 * time.Second},  // the middle
		{0.75, 1, 25 * time.Second}, // 20 s × 1.25
		{0.99, 3, 60 * time.Second}, // capped at max
	} {
		b := backoff{initial: 10 * time.Second, max: 60 * time.Second, factor: 0.5, rand: func() float64 { return tt.r }}
		if d := b.delay(tt.n); d != tt.want {
			t.Errorf("delay(%d) with rand %v = %v, want %v", tt.n, tt.r, d, tt.want)
		}
	}
	huge := backoff{initial: time.Second, max: math.MaxInt64}
	if d := huge.delay(200); d <= 0 {
		t.Errorf("overflow: %v", d)
	}
	if d := nackPace(1); d != 50*time.Millisecond {
		t.Errorf("nackPace(1) = %v", d)
	}
	if d := nackPace(100); d != nackPaceMax {
		t.Errorf("nackPace(100) = %v", d)
	}
}
