package resilience

import (
	"testing"
	"time"
)

// testNow is the fixed clock of the test vectors: Fri, 29 Sep 2023
// 16:26:37 GMT.
var testNow = time.Unix(1696004797, 0).UTC()

func hl(kv ...string) HeaderList {
	var l HeaderList
	for i := 0; i+1 < len(kv); i += 2 {
		l = append(l, HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return l
}

const (
	std = "STD"
	itr = "INT"
)

// vector is one row of the provider-failure test vectors (section (d)
// of the research). Jitter is off: hints are exact, backoff is its upper
// bound. Where a row disagrees with the design (resilience.md), the
// design wins and the row's comment says so.
type vector struct {
	id      string
	profile string
	status  int
	tk      TransportKind
	h       HeaderList
	body    string
	commit  bool
	retries int
	alt     bool
	budget  time.Duration // remaining deadline; 0 for none
	maxRetr int           // the target's num_retries when it matters

	class  Class
	action Action
	delay  time.Duration
	skip   time.Duration
	countT bool
	countP bool
}

const (
	openAIRate = `{"error":{"message":"Rate limit reached for gpt-4 in organization org-x on tokens_usage_based per min: ` +
		`Limit 10000, Used 8782, Requested 8172. Please try again in 41.724s. Visit https://platform.openai.com/account/rate-limits.",` +
		`"type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	rateLimitExceeded = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	geminiMinute      = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.",` +
		`"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[` +
		`{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",` +
		`"quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaValue":"250000"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.Help","links":[]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`
	geminiDaily = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.",` +
		`"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[` +
		`{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`
	geminiHalfSecond = `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED",` +
		`"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.5s"}]}}`
	anthropicOverloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
)

// hintVectors are rows 1–48.
var hintVectors = []vector{
	{id: "01", profile: std, status: 429, h: hl("Retry-After", "20"), class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "02", profile: std, status: 429, h: hl("Retry-After", "0"), class: ClassRate, action: ActionRetry, delay: time.Second},
	// Row 3 calls -10 invalid; resilience.md reads negatives as 0. Same delay.
	{id: "03", profile: std, status: 429, h: hl("Retry-After", "-10"), class: ClassRate, action: ActionRetry, delay: time.Second},
	{id: "04", profile: std, status: 429, h: hl("Retry-After", "120"), class: ClassRate, action: ActionRetry, delay: 120 * time.Second, skip: 120 * time.Second},
	{id: "05", profile: std, status: 429, h: hl("Retry-After", "121"), class: ClassRate, action: ActionFailover, skip: 121 * time.Second},
	{id: "06", profile: std, status: 429, h: hl("retry-after-ms", "120000"), class: ClassRate, action: ActionRetry, delay: 120 * time.Second, skip: 120 * time.Second},
	{id: "07", profile: std, status: 429, h: hl("retry-after-ms", "120001"), class: ClassRate, action: ActionFailover, skip: 120001 * time.Millisecond},
	{id: "08", profile: std, status: 429, h: hl("Retry-After", "Fri, 29 Sep 2023 16:26:57 GMT"), class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "09", profile: std, status: 429, h: hl("Retry-After", "Friday, 29-Sep-23 16:26:57 GMT"), class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "10", profile: std, status: 429, h: hl("Retry-After", "Fri Sep 29 16:26:57 2023"), class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "11", profile: std, status: 429, h: hl("Retry-After", "Fri, 29 Sep 2023 16:26:27 GMT"), class: ClassRate, action: ActionRetry, delay: time.Second},
	{id: "12", profile: std, status: 429, h: hl("Retry-After", "Fri, 29 Sep 2023 16:28:38 GMT"), class: ClassRate, action: ActionFailover, skip: 121 * time.Second},
	// Rows 13, 14, 16, 17, 30, 38: an invalid hint is no hint, and per
	// resilience.md a 429 without a hint counts against the target (the
	// rows say no breaker).
	{id: "13", profile: std, status: 429, h: hl("Retry-After", "Zun, 29 Sep 2023 16:26:27 GMT"), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "14", profile: std, status: 429, h: hl("Retry-After", "Fri, 29 Sep 100000 16:26:57 GMT"), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "15", profile: std, status: 429, h: hl("Retry-After", "99999999999999999999999999999999999"), class: ClassRate, action: ActionFailover, skip: MaxSkip},
	{id: "16-inf", profile: std, status: 429, h: hl("Retry-After", "inf"), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "16-nan", profile: std, status: 429, h: hl("Retry-After", "nan"), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "17", profile: std, status: 429, h: hl("Retry-After", ""), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "18", profile: std, status: 429, h: hl("Retry-After", "1.5"), class: ClassRate, action: ActionRetry, delay: 1500 * time.Millisecond, skip: 1500 * time.Millisecond},
	{id: "19", profile: std, status: 429, h: hl("retry-after-ms", "1500", "Retry-After", "2"), class: ClassRate, action: ActionRetry, delay: 2 * time.Second, skip: 2 * time.Second},
	{id: "20", profile: std, status: 429, h: hl("retry-after-ms", "abc", "Retry-After", "3"), class: ClassRate, action: ActionRetry, delay: 3 * time.Second, skip: 3 * time.Second},
	{id: "21", profile: std, status: 429, h: hl("x-ms-retry-after-ms", "4000"), class: ClassRate, action: ActionRetry, delay: 4 * time.Second, skip: 4 * time.Second},
	{id: "22", profile: std, status: 503, h: hl("x-amz-retry-after", "3000"), class: ClassOverload, action: ActionRetry, delay: 3 * time.Second, skip: 3 * time.Second, countT: true, countP: true},
	{id: "23", profile: std, status: 429, h: hl("Retry-After", "  30 "), class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "24", profile: std, status: 429, h: hl("Retry-After", "30", "Retry-After", "60"), class: ClassRate, action: ActionRetry, delay: 60 * time.Second, skip: 60 * time.Second},
	{id: "25", profile: std, status: 429, h: hl("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
		"x-ratelimit-remaining-tokens", "15000", "x-ratelimit-reset-tokens", "6m0s"), class: ClassRate, action: ActionRetry, delay: time.Second, skip: time.Second},
	{id: "26", profile: std, status: 429, h: hl("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"), class: ClassRate, action: ActionFailover, skip: 360 * time.Second},
	{id: "27", profile: std, status: 429, h: hl("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms"), class: ClassRate, action: ActionRetry, delay: 20 * time.Millisecond, skip: 20 * time.Millisecond},
	{id: "28", profile: std, status: 429, h: hl("retry-after", "8", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "7.66s"), class: ClassRate, action: ActionRetry, delay: 8 * time.Second, skip: 8 * time.Second},
	{id: "29", profile: std, status: 429, h: hl("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2m59.56s"), class: ClassRate, action: ActionFailover, skip: 179560 * time.Millisecond},
	{id: "30", profile: std, status: 429, h: hl("x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0"), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "31", profile: std, status: 429, h: hl("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2023-09-29T16:26:47Z"), class: ClassRate, action: ActionRetry, delay: 10 * time.Second, skip: 10 * time.Second},
	{id: "32", profile: std, status: 429, h: hl("retry-after", "15", "anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:37Z"), class: ClassRate, action: ActionRetry, delay: 15 * time.Second, skip: 15 * time.Second},
	{id: "33", profile: std, status: 429, body: geminiMinute, class: ClassRate, action: ActionRetry, delay: 26 * time.Second, skip: 26 * time.Second},
	{id: "34", profile: std, status: 429, body: geminiHalfSecond, class: ClassRate, action: ActionRetry, delay: 500 * time.Millisecond, skip: 500 * time.Millisecond},
	{id: "35", profile: std, status: 429, body: geminiDaily, class: ClassQuota, action: ActionFailover, skip: MaxSkip},
	{id: "36", profile: std, status: 429, h: hl("RateLimit", `"default";r=0;t=30`), class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "37", profile: std, status: 429, h: hl("RateLimit", `"default";r=0;t=30`, "Retry-After", "10"), class: ClassRate, action: ActionRetry, delay: 10 * time.Second, skip: 10 * time.Second},
	{id: "38", profile: std, status: 429, h: hl("RateLimit", `default;r=abc`), class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "39", profile: std, status: 429, h: hl("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1696004827"), class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "40", profile: std, status: 429, h: hl("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1696004827000"), class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "41", profile: std, status: 429, h: hl("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30"), class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "42", profile: std, status: 429, h: hl("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1696004700"), class: ClassRate, action: ActionRetry, delay: time.Second},
	// Rows 43, 44: gRPC UNAVAILABLE reaches ext_proc as HTTP 503.
	{id: "43", profile: std, status: 503, h: hl("grpc-status", "14", "grpc-retry-pushback-ms", "1500"), class: ClassOverload, action: ActionRetry, delay: 1500 * time.Millisecond, skip: 1500 * time.Millisecond, countT: true, countP: true},
	{id: "44", profile: std, status: 503, h: hl("grpc-status", "14", "grpc-retry-pushback-ms", "-1"), class: ClassOverload, action: ActionFailover, countT: true, countP: true},
	{id: "45", profile: std, status: 429, body: `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API ` +
		`version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 37 seconds."}}`,
		class: ClassRate, action: ActionRetry, delay: 37 * time.Second, skip: 37 * time.Second},
	{id: "46", profile: std, status: 429, body: `{"error":{"code":"429","message":"Requests to the Embeddings_Create Operation have exceeded ` +
		`call rate limit of your current pricing tier. Please retry after 86400 seconds."}}`, class: ClassRate, action: ActionFailover, skip: MaxSkip},
	{id: "47", profile: std, status: 429, body: openAIRate, class: ClassRate, action: ActionRetry, delay: 41724 * time.Millisecond, skip: 41724 * time.Millisecond},
	{id: "48", profile: itr, alt: true, status: 429, body: openAIRate, class: ClassRate, action: ActionFailover, skip: 41724 * time.Millisecond},
}

func TestVectorsHints(t *testing.T) { runVectors(t, hintVectors) }

func runVectors(t *testing.T, vs []vector) {
	t.Helper()
	for _, v := range vs {
		t.Run("row"+v.id, func(t *testing.T) {
			prof := Standard()
			if v.profile == itr {
				prof = Interactive()
			}
			if v.maxRetr > 0 {
				prof.MaxRetries = v.maxRetr
			}
			p, err := NewPolicy(prof, nil)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Status: v.status, Transport: v.tk, Header: v.h, Body: []byte(v.body), Committed: v.commit, Now: testNow}
			got := Classify(in)
			a := Attempt{Retries: v.retries, Now: testNow, HasAlternative: v.alt}
			if v.budget > 0 {
				a.Deadline = testNow.Add(v.budget)
			}
			step := p.Plan(got, a)
			if got.Class != v.class || got.CountTarget != v.countT || got.CountProvider != v.countP {
				t.Errorf("verdict = class %q target %v provider %v, want %q %v %v (%+v)",
					got.Class, got.CountTarget, got.CountProvider, v.class, v.countT, v.countP, got)
			}
			if step.Action != v.action || step.Delay != v.delay || step.SkipFor != v.skip {
				t.Errorf("step = %v delay %v skip %v, want %v %v %v (verdict %+v)",
					step.Action, step.Delay, step.SkipFor, v.action, v.delay, v.skip, got)
			}
		})
	}
}
