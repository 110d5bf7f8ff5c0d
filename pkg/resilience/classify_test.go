package resilience

import "testing"

func TestClassifyConcurrencyHeaders(t *testing.T) {
	v := Classify(Input{Status: 429, Header: hl("current-concurrent-requests", "10", "maximum-concurrent-requests", "10"), Now: testNow})
	if v.Class != ClassConcurrency || v.Hint != ConcurrencyWait || v.CountTarget || v.SkipFor != 0 {
		t.Fatalf("verdict = %+v, want concurrency with the 250 ms wait", v)
	}
	v = Classify(Input{Status: 429, Header: hl("current-concurrent-requests", "3", "maximum-concurrent-requests", "10"), Now: testNow})
	if v.Class != ClassRate {
		t.Fatalf("below the maximum: %+v, want rate", v)
	}
}

func TestClassifySuccessAndNonErrorBodies(t *testing.T) {
	for _, in := range []Input{
		{Status: 200, Body: []byte(`{"choices":[{"message":{"content":"the server is overloaded with rate limit requests"}}]}`)},
		{Status: 204},
		{Status: 304, Body: []byte("not json")},
	} {
		if v := Classify(in); v.Failed() {
			t.Errorf("Classify(%d, %q) = %+v, want success", in.Status, in.Body, v)
		}
	}
	if v := Classify(Input{}); v.Class != ClassTransport {
		t.Errorf("zero input = %+v, want a transport failure", v)
	}
}

func TestClassifyShouldRetryTrueOverridesCallerError(t *testing.T) {
	v := Classify(Input{Status: 400, Header: hl("x-should-retry", "true"), Now: testNow})
	if !v.Retry || v.CallerError {
		t.Fatalf("verdict = %+v, want retry allowed", v)
	}
}
