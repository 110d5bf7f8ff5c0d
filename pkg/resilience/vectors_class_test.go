package resilience

import (
	"testing"
	"time"
)

// classVectors are rows 49–102. Where resilience.md sets other numbers
// than the research (standard base 1 s for every class, concurrency wait
// 250 ms, 408/409 without breaker, 401/402/403 and 429 without a hint
// counted against the target), the design wins; the rows say so.
var classVectors = []vector{
	{id: "49", profile: itr, alt: true, status: 429, h: hl("retry-after", "3"), body: rateLimitExceeded, class: ClassRate, action: ActionFailover, skip: 3 * time.Second},
	{id: "50", profile: itr, status: 429, h: hl("retry-after", "3"), body: rateLimitExceeded, class: ClassRate, action: ActionRetry, delay: 3 * time.Second, skip: 3 * time.Second},
	{id: "51", profile: std, status: 429, body: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.",` +
		`"type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, class: ClassQuota, action: ActionFailover, skip: MaxSkip},
	{id: "52", profile: std, status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"Spend limit reached",` +
		`"details":{"error_code":"enforced_spend_limit_reached"}}}`, class: ClassQuota, action: ActionFailover, skip: MaxSkip},
	// Row 53: a request larger than the whole TPM budget fails over, like a
	// context-length error, to a hop that can take it; no skip.
	{id: "53", profile: std, status: 429, body: `{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): ` +
		`Limit 30000, Requested 30601. The input or output tokens must be reduced in order to run successfully.","type":"tokens",` +
		`"param":null,"code":"rate_limit_exceeded"}}`, class: ClassContextLength, action: ActionFailover},
	// Rows 54, 56: resilience.md waits 250 ms for a concurrency limit (row: 1 s).
	{id: "54", profile: std, status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"Number of concurrent ` +
		`connections has exceeded your rate limit. Please try again later or contact sales."}}`, class: ClassConcurrency, action: ActionRetry, delay: ConcurrencyWait},
	{id: "55", profile: itr, alt: true, status: 429, body: `{"error":"Model is overloaded","error_type":"overloaded"}`, class: ClassConcurrency, action: ActionFailover},
	{id: "56", profile: std, status: 503, h: hl("x-amzn-errortype", "ServiceUnavailableException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
		body: `{"message":"Too many connections, please wait before trying again."}`, class: ClassConcurrency, action: ActionRetry, delay: ConcurrencyWait},
	{id: "57", profile: std, status: 529, h: hl("x-should-retry", "true"), body: anthropicOverloaded, class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "58", profile: itr, alt: true, status: 529, body: anthropicOverloaded, class: ClassOverload, action: ActionFailover, countT: true, countP: true},
	{id: "59", profile: std, status: 503, body: `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`,
		class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "60", profile: std, status: 503, body: `{"object":"error","message":"Service tier capacity exceeded for this model.","type":"invalid_request_error","param":null,"code":null}`,
		class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "61", profile: std, status: 498, body: `{"error":{"message":"Capacity exceeded for flex tier, please try again.","type":"server_error","code":"capacity_exceeded"}}`,
		class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "62", profile: std, status: 429, body: `{"error":{"code":429,"message":"Resource exhausted, please try again later.","status":"RESOURCE_EXHAUSTED"}}`,
		class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "63", profile: std, status: 429, body: `{"error":{"code":429,"message":"Too many requests. Exceeded the Provisioned Throughput.","status":"RESOURCE_EXHAUSTED"}}`,
		class: ClassRate, action: ActionFailover},
	// Rows 64, 86: a 429 without a hint counts against the target (resilience.md).
	{id: "64", profile: std, status: 429, h: hl("x-amzn-errortype", "ThrottlingException"), body: `{"message":"Too many requests, please wait before trying again."}`,
		class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	// Row 65: the 4th attempt needs num_retries ≥ 4 on the target.
	{id: "65", profile: std, retries: 3, maxRetr: 5, status: 429, h: hl("x-amzn-errortype", "ModelNotReadyException"), body: `{"message":"Model is not ready for inference."}`,
		class: ClassOverload, action: ActionRetry, delay: 8 * time.Second, countT: true},
	{id: "66", profile: std, status: 429, h: hl("x-ratelimit-reset", "2"), body: `{"error":{"message":"dynamic token limit","type":"dynamic_token_limited"}}`,
		class: ClassRate, action: ActionRetry, delay: 2 * time.Second, skip: 2 * time.Second},
	{id: "67", profile: std, status: 503, class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	// Rows 68, 70, 72, 73, 88, 92: the standard base is 1 s for every class (row: 50 ms).
	{id: "68", profile: std, status: 500, body: `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`,
		class: ClassServer, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "69", profile: std, retries: 2, status: 500, class: ClassServer, action: ActionFailover, countT: true, countP: true},
	{id: "70", profile: std, status: 502, body: `<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>`,
		class: ClassServer, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "71", profile: itr, alt: true, status: 504, class: ClassTimeout, action: ActionFailover, countT: true, countP: true},
	// Row 72: resilience.md has 408 retry without breaker (row: yes/yes).
	{id: "72", profile: std, status: 408, class: ClassTimeout, action: ActionRetry, delay: time.Second},
	{id: "73", profile: std, status: 409, body: `{"type":"error","error":{"type":"conflict_error","message":"Conflict"}}`, class: ClassServer, action: ActionRetry, delay: time.Second},
	{id: "74", profile: std, alt: true, status: 400, body: `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",` +
		`"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, class: ClassContextLength, action: ActionFailover},
	// Row 75: Plan fails over; with no larger-context hop the walk ends
	// exhausted and the caller gets the upstream error (TestVector75).
	{id: "75", profile: std, status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205351 tokens > 200000 maximum"}}`,
		class: ClassContextLength, action: ActionFailover},
	{id: "76", profile: std, status: 422, body: "{\"error\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2000 `inputs` tokens and 100 `max_new_tokens`\",\"error_type\":\"validation\"}",
		class: ClassContextLength, action: ActionFailover},
	{id: "77", profile: std, status: 400, body: `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",` +
		`"type":null,"param":"prompt","code":"content_filter","innererror":{"code":"ResponsibleAIPolicyViolation"}}}`, class: ClassContentPolicy, action: ActionFail},
	{id: "78", profile: std, status: 400, body: `{"error":{"message":"Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.",` +
		`"type":"invalid_request_error","param":"temperature","code":"decimal_above_max_value"}}`, class: ClassClient, action: ActionFail},
	{id: "79", profile: std, status: 400, body: `{"error":{"message":"Invalid 'user': string too long. Expected a string with maximum length 256, but got a string with length 300 instead.",` +
		`"type":"invalid_request_error","param":"user","code":"string_above_max_length"}}`, class: ClassClient, action: ActionFail},
	// Rows 80, 81: resilience.md counts 401/403 against the target (row: no).
	{id: "80", profile: std, status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, class: ClassAuth, action: ActionFailover, countT: true},
	{id: "81", profile: std, status: 403, h: hl("x-amzn-errortype", "AccessDeniedException"), body: `{"message":"You don't have access to the model with the specified model ID."}`,
		class: ClassAuth, action: ActionFailover, countT: true},
	{id: "82", profile: std, status: 404, body: "{\"error\":{\"message\":\"The model `gpt-x` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}",
		class: ClassConfig, action: ActionFailover},
	{id: "83", profile: std, status: 413, body: `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, class: ClassClient, action: ActionFail},
	{id: "84", profile: std, status: 402, body: `{"error":{"code":402,"message":"This request requires more credits, or fewer max_tokens. You requested up to 4096 tokens, but can only afford 1000."}}`,
		class: ClassQuota, action: ActionFailover, skip: MaxSkip},
	{id: "85", profile: std, status: 500, h: hl("x-should-retry", "false"), class: ClassServer, action: ActionFailover, countT: true, countP: true},
	{id: "86", profile: std, status: 503, body: `{"error":{"code":429,"message":"upstream gateway error"}}`, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},

	// Transport and streaming. Rows 87, 88: resilience.md counts connect
	// errors against the provider tier too (row: target only); that tier
	// still opens only when two targets fail.
	{id: "87", profile: itr, alt: true, tk: TransportConnect, class: ClassTransport, action: ActionFailover, countT: true, countP: true},
	{id: "88", profile: std, tk: TransportConnect, class: ClassTransport, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "89", profile: std, tk: TransportDNS, class: ClassTransport, action: ActionFailover, countT: true},
	{id: "90", profile: std, tk: TransportTLS, class: ClassTransport, action: ActionFailover, countT: true},
	// Row 91: resilience.md has no immediate retry; the backoff applies.
	{id: "91", profile: std, tk: TransportRefusedStream, class: ClassTransport, action: ActionRetry, delay: time.Second},
	{id: "92", profile: std, tk: TransportReset, class: ClassTransport, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "93", profile: itr, alt: true, tk: TransportTimeout, class: ClassTimeout, action: ActionFailover, countT: true, countP: true},
	{id: "94", profile: std, tk: TransportCanceled, class: ClassClient, action: ActionFail},
	{id: "95", profile: std, status: 200, commit: true, body: "event: error\ndata: " + anthropicOverloaded + "\n\n", class: ClassOverload, action: ActionAbort, countT: true, countP: true},
	{id: "96-std", profile: std, status: 200, body: `event: error` + "\n" + `data: {"type":"error","error":{"type":"server_error","code":"server_is_overloaded","message":"busy"}}`,
		class: ClassOverload, action: ActionRetry, delay: time.Second, countT: true, countP: true},
	{id: "96-int", profile: itr, alt: true, status: 200, body: `data: {"type":"error","error":{"type":"server_error","code":"server_is_overloaded","message":"busy"}}`,
		class: ClassOverload, action: ActionFailover, countT: true, countP: true},
	{id: "97", profile: std, commit: true, tk: TransportReset, class: ClassTransport, action: ActionAbort, countT: true, countP: true},
	// Row 98: a throttle without a hint counts against the target (resilience.md).
	{id: "98", profile: std, status: 200, commit: true, h: hl("x-amzn-errortype", "throttlingException"), body: `{"message":"Too many requests, please wait before trying again."}`,
		class: ClassRate, action: ActionAbort, countT: true},
	{id: "99", profile: std, status: 200, commit: true, body: `data: {"error":{"code":502,"message":"Provider returned error"}}`, class: ClassServer, action: ActionAbort, countT: true, countP: true},
	{id: "100", profile: std, status: 200, body: ": OPENROUTER PROCESSING\n\n", class: ClassNone, action: ActionNone},

	// Budgets and deadlines.
	{id: "101", profile: std, budget: 20 * time.Second, status: 429, h: hl("Retry-After", "30"), class: ClassRate, action: ActionFailover, skip: 30 * time.Second},
	// Row 102: resilience.md has no retry token bucket; a spent retry
	// budget is the same-target retry count.
	{id: "102", profile: std, retries: 2, status: 503, class: ClassOverload, action: ActionFailover, countT: true, countP: true},
}

func TestVectorsClassification(t *testing.T) { runVectors(t, classVectors) }
