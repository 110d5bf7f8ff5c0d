package envoyapi

import (
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestPolicyNameIsAnEscapedStructuredString(t *testing.T) {
	for name, want := range map[string]string{
		"":                       `"default"`,
		"per_key":                `"per_key"`,
		`a"b\c`:                  `"a\"b\\c"`,
		`"\`:                     `"\"\\"`,
		"tenant 42":              `"tenant 42"`,
		strings.Repeat("n", 200): `"` + strings.Repeat("n", 200) + `"`, // past the stack buffer
	} {
		cl := &ratelimitv3.RateLimitResponse_RateLimit{Name: name}
		if got := string(appendPolicyName([]byte("x"), cl)); got != "x"+want {
			t.Errorf("policy name of %q = %s, want x%s", name, got, want)
		}
	}
}
