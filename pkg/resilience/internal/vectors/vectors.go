// Package vectors holds the retry-hint rows (1–48) of the provider-failure
// test vectors (section (d) of the research), written once for the two
// packages that test them: retryhint checks the hint each response
// carries, resilience the verdict and the step that follow from it.
//
// The rows are data: read them, never change them in a test. Now is the
// vectors' clock; every wait below is measured from it.
package vectors

import (
	"net/http"
	"time"
)

// Now is the fixed clock of the vectors: Fri, 29 Sep 2023 16:26:37 GMT.
var Now = time.Unix(1696004797, 0).UTC()

// H builds headers from name, value pairs, keeping repeated names in
// order.
func H(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// Hint is one row: a response and the hint it carries.
type Hint struct {
	ID     string
	Status int
	Header http.Header
	// Body is the raw error body. Delays and Text are what it says about
	// waiting: its google.rpc.RetryInfo delays and its error message.
	Body   string
	Delays []string
	Text   string
	// Wait is the hint; HasWait is false when the response carries none.
	Wait    time.Duration
	HasWait bool
}

// Error messages and bodies of the rows that carry a hint in the body.
const (
	azureChat  = "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 37 seconds."
	azureEmbed = "Requests to the Embeddings_Create Operation have exceeded call rate limit of your current pricing tier. Please retry after 86400 seconds."
	openAIRate = "Rate limit reached for gpt-4 in organization org-x on tokens_usage_based per min: Limit 10000, Used 8782, Requested 8172. " +
		"Please try again in 41.724s. Visit https://platform.openai.com/account/rate-limits."
	openAIRateBody = `{"error":{"message":"` + openAIRate + `","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`

	geminiMinute = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.",` +
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
)

// Hints are rows 1–48. Row 16 is two rows, for "inf" and "nan".
var Hints = []Hint{
	{ID: "01", Status: 429, Header: H("Retry-After", "20"), Wait: 20 * time.Second, HasWait: true},
	{ID: "02", Status: 429, Header: H("Retry-After", "0"), HasWait: true},
	// Row 3 calls -10 invalid; resilience.md reads a negative as 0.
	{ID: "03", Status: 429, Header: H("Retry-After", "-10"), HasWait: true},
	{ID: "04", Status: 429, Header: H("Retry-After", "120"), Wait: 120 * time.Second, HasWait: true},
	{ID: "05", Status: 429, Header: H("Retry-After", "121"), Wait: 121 * time.Second, HasWait: true},
	{ID: "06", Status: 429, Header: H("retry-after-ms", "120000"), Wait: 120 * time.Second, HasWait: true},
	{ID: "07", Status: 429, Header: H("retry-after-ms", "120001"), Wait: 120001 * time.Millisecond, HasWait: true},
	{ID: "08", Status: 429, Header: H("Retry-After", "Fri, 29 Sep 2023 16:26:57 GMT"), Wait: 20 * time.Second, HasWait: true},
	{ID: "09", Status: 429, Header: H("Retry-After", "Friday, 29-Sep-23 16:26:57 GMT"), Wait: 20 * time.Second, HasWait: true},
	{ID: "10", Status: 429, Header: H("Retry-After", "Fri Sep 29 16:26:57 2023"), Wait: 20 * time.Second, HasWait: true},
	{ID: "11", Status: 429, Header: H("Retry-After", "Fri, 29 Sep 2023 16:26:27 GMT"), HasWait: true},
	{ID: "12", Status: 429, Header: H("Retry-After", "Fri, 29 Sep 2023 16:28:38 GMT"), Wait: 121 * time.Second, HasWait: true},
	{ID: "13", Status: 429, Header: H("Retry-After", "Zun, 29 Sep 2023 16:26:27 GMT")},
	{ID: "14", Status: 429, Header: H("Retry-After", "Fri, 29 Sep 100000 16:26:57 GMT")},
	{ID: "15", Status: 429, Header: H("Retry-After", "99999999999999999999999999999999999"), Wait: 24 * time.Hour, HasWait: true},
	{ID: "16-inf", Status: 429, Header: H("Retry-After", "inf")},
	{ID: "16-nan", Status: 429, Header: H("Retry-After", "nan")},
	{ID: "17", Status: 429, Header: H("Retry-After", "")},
	{ID: "18", Status: 429, Header: H("Retry-After", "1.5"), Wait: 1500 * time.Millisecond, HasWait: true},
	{ID: "19", Status: 429, Header: H("retry-after-ms", "1500", "Retry-After", "2"), Wait: 2 * time.Second, HasWait: true},
	{ID: "20", Status: 429, Header: H("retry-after-ms", "abc", "Retry-After", "3"), Wait: 3 * time.Second, HasWait: true},
	{ID: "21", Status: 429, Header: H("x-ms-retry-after-ms", "4000"), Wait: 4 * time.Second, HasWait: true},
	{ID: "22", Status: 503, Header: H("x-amz-retry-after", "3000"), Wait: 3 * time.Second, HasWait: true},
	{ID: "23", Status: 429, Header: H("Retry-After", "  30 "), Wait: 30 * time.Second, HasWait: true},
	{ID: "24", Status: 429, Header: H("Retry-After", "30", "Retry-After", "60"), Wait: 60 * time.Second, HasWait: true},
	{ID: "25", Status: 429, Header: H("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
		"x-ratelimit-remaining-tokens", "15000", "x-ratelimit-reset-tokens", "6m0s"), Wait: time.Second, HasWait: true},
	{ID: "26", Status: 429, Header: H("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"), Wait: 6 * time.Minute, HasWait: true},
	{ID: "27", Status: 429, Header: H("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms"), Wait: 20 * time.Millisecond, HasWait: true},
	{ID: "28", Status: 429, Header: H("retry-after", "8", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "7.66s"), Wait: 8 * time.Second, HasWait: true},
	{ID: "29", Status: 429, Header: H("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2m59.56s"), Wait: 179560 * time.Millisecond, HasWait: true},
	{ID: "30", Status: 429, Header: H("x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0")},
	{ID: "31", Status: 429, Header: H("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2023-09-29T16:26:47Z"),
		Wait: 10 * time.Second, HasWait: true},
	{ID: "32", Status: 429, Header: H("retry-after", "15", "anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:37Z"),
		Wait: 15 * time.Second, HasWait: true},
	{ID: "33", Status: 429, Body: geminiMinute, Delays: []string{"26s"}, Wait: 26 * time.Second, HasWait: true},
	{ID: "34", Status: 429, Body: geminiHalfSecond, Delays: []string{"0.5s"}, Wait: 500 * time.Millisecond, HasWait: true},
	{ID: "35", Status: 429, Body: geminiDaily, Delays: []string{"26s"}, Wait: 26 * time.Second, HasWait: true},
	{ID: "36", Status: 429, Header: H("RateLimit", `"default";r=0;t=30`), Wait: 30 * time.Second, HasWait: true},
	{ID: "37", Status: 429, Header: H("RateLimit", `"default";r=0;t=30`, "Retry-After", "10"), Wait: 10 * time.Second, HasWait: true},
	{ID: "38", Status: 429, Header: H("RateLimit", `default;r=abc`)},
	{ID: "39", Status: 429, Header: H("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1696004827"), Wait: 30 * time.Second, HasWait: true},
	{ID: "40", Status: 429, Header: H("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1696004827000"), Wait: 30 * time.Second, HasWait: true},
	{ID: "41", Status: 429, Header: H("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "30"), Wait: 30 * time.Second, HasWait: true},
	{ID: "42", Status: 429, Header: H("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1696004700"), HasWait: true},
	// Rows 43, 44: gRPC UNAVAILABLE reaches ext_proc as HTTP 503.
	{ID: "43", Status: 503, Header: H("grpc-status", "14", "grpc-retry-pushback-ms", "1500"), Wait: 1500 * time.Millisecond, HasWait: true},
	{ID: "44", Status: 503, Header: H("grpc-status", "14", "grpc-retry-pushback-ms", "-1")},
	{ID: "45", Status: 429, Body: `{"error":{"code":"429","message":"` + azureChat + `"}}`, Text: azureChat, Wait: 37 * time.Second, HasWait: true},
	{ID: "46", Status: 429, Body: `{"error":{"code":"429","message":"` + azureEmbed + `"}}`, Text: azureEmbed, Wait: 24 * time.Hour, HasWait: true},
	{ID: "47", Status: 429, Body: openAIRateBody, Text: openAIRate, Wait: 41724 * time.Millisecond, HasWait: true},
	{ID: "48", Status: 429, Body: openAIRateBody, Text: openAIRate, Wait: 41724 * time.Millisecond, HasWait: true},
}
