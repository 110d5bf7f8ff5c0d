package resilience

import (
	"regexp"
	"slices"
	"time"
)

// effect is what a class of failure does; the tables below map transport
// kinds, body patterns and status codes onto effects.
type effect struct {
	class                    Class
	retry, failover          bool
	target, provider, caller bool
	skip                     time.Duration // fixed skip (quota)
	wait                     time.Duration // wait when the upstream gave no hint
}

func (e effect) verdict() Verdict {
	return Verdict{
		Class: e.class, Retry: e.retry, Failover: e.failover,
		CountTarget: e.target, CountProvider: e.provider,
		CallerError: e.caller, SkipFor: e.skip,
	}
}

var (
	effRate        = effect{class: ClassRate, retry: true, failover: true, target: true}
	effRateNoRetry = effect{class: ClassRate, failover: true}
	effQuota       = effect{class: ClassQuota, failover: true, skip: MaxSkip}
	effConcurrency = effect{class: ClassConcurrency, retry: true, failover: true, wait: ConcurrencyWait}
	effOverload    = effect{class: ClassOverload, retry: true, failover: true, target: true, provider: true}
	effWarming     = effect{class: ClassOverload, retry: true, failover: true, target: true}
	effServer      = effect{class: ClassServer, retry: true, failover: true, target: true, provider: true}
	effServerFinal = effect{class: ClassServer, failover: true, target: true, provider: true}
	effConflict    = effect{class: ClassServer, retry: true, failover: true}
	effTimeout     = effect{class: ClassTimeout, retry: true, failover: true, target: true, provider: true}
	effReqTimeout  = effect{class: ClassTimeout, retry: true, failover: true}
	effAuth        = effect{class: ClassAuth, failover: true, target: true}
	effConfig      = effect{class: ClassConfig, failover: true}
	effContext     = effect{class: ClassContextLength, failover: true}
	effContent     = effect{class: ClassContentPolicy, caller: true}
	effClient      = effect{class: ClassClient, caller: true}
	effTransport   = effect{class: ClassTransport, retry: true, failover: true, target: true, provider: true}
)

// transportEffects maps each transport kind; TransportNone is absent.
var transportEffects = map[TransportKind]effect{
	TransportTimeout:       effTimeout,
	TransportConnect:       effTransport,
	TransportDNS:           {class: ClassTransport, failover: true, target: true},
	TransportTLS:           {class: ClassTransport, failover: true, target: true},
	TransportRefusedStream: {class: ClassTransport, retry: true, failover: true},
	TransportReset:         effTransport,
	TransportCanceled:      {class: ClassClient, caller: true},
	TransportOther:         effTransport,
}

func transportEffect(k TransportKind) (effect, bool) {
	if k == TransportNone {
		return effect{}, false
	}
	if e, ok := transportEffects[k]; ok {
		return e, true
	}
	return effTransport, true
}

// statusEffects maps status codes the design names; others fall back by
// range in statusEffect.
var statusEffects = map[int]effect{
	400: effClient, 401: effAuth, 402: effAuth, 403: effAuth, 404: effConfig,
	405: effClient, 408: effReqTimeout, 409: effConflict, 411: effClient,
	413: effClient, 414: effClient, 415: effClient, 422: effClient, 429: effRate,
	500: effServer, 502: effServer, 503: effOverload, 504: effTimeout, 529: effOverload,
}

func statusEffect(status int) effect {
	if e, ok := statusEffects[status]; ok {
		return e
	}
	switch {
	case status >= 500:
		return effServerFinal
	case status >= 400:
		return effClient
	}
	return effect{}
}

// bodyRule matches an error body. Every matcher that is set must match:
// codes (any equal), message (regexp on the message, or the raw body when
// it is not JSON), quotaID (any QuotaFailure violation), status (the HTTP
// status, 0 for any).
type bodyRule struct {
	name    string
	codes   []string
	message *regexp.Regexp
	quotaID *regexp.Regexp
	status  int
	eff     effect
}

func (r *bodyRule) match(b *bodyInfo, status int) bool {
	if r.status != 0 && r.status != status {
		return false
	}
	if r.codes != nil && !b.hasCode(r.codes) {
		return false
	}
	if r.message != nil && !r.message.MatchString(b.text) {
		return false
	}
	if r.quotaID != nil && !slices.ContainsFunc(b.quotaIDs, r.quotaID.MatchString) {
		return false
	}
	return true
}

func bodyEffect(b *bodyInfo, status int) (effect, bool) {
	if len(b.codes) == 0 && b.text == "" && len(b.quotaIDs) == 0 {
		return effect{}, false
	}
	for i := range bodyRules {
		if bodyRules[i].match(b, status) {
			return bodyRules[i].eff, true
		}
	}
	return effect{}, false
}

func re(expr string) *regexp.Regexp { return regexp.MustCompile(expr) }

// bodyRules are tried in order; the first match decides. Specific rules
// come before general ones: a daily quota before a per-minute one, "too
// large for the token budget" before a rate limit, a concurrency limit
// before an overload message, and so on.
var bodyRules = []bodyRule{
	{name: "google-daily-quota", quotaID: re(`(?i)per_?day`), eff: effQuota},
	{name: "google-window-quota", quotaID: re(`.`), eff: effRate},
	{name: "param-too-long", codes: []string{"string_above_max_length"}, eff: effClient},
	{name: "request-over-token-budget", message: re(`(?i)request too large for .* per min|tokens must be reduced`), eff: effContext},
	{name: "quota-code", codes: []string{"insufficient_quota", "billing_hard_limit_reached",
		"organization_spend_limit_exceeded", "project_spend_limit_exceeded", "credit_balance_exhausted",
		"enforced_spend_limit_reached", "billing_error", "insufficient_credits", "payment_required"}, eff: effQuota},
	{name: "quota-message", message: re(`(?i)exceeded your current quota|requires more credits|insufficient (?:credits|balance|funds)` +
		`|credit balance is too low|spend limit|reached your specified api usage limits|per[- ]day|daily (?:limit|quota)`), eff: effQuota},
	{name: "context-code", codes: []string{"context_length_exceeded"}, eff: effContext},
	{name: "context-message", message: re(`(?i)maximum context length|exceeds? (?:the )?context (?:limit|window)` +
		`|prompt is too long|maximum context limit|longer than the model's context length|input tokens exceed the configured limit` +
		"|inputs. tokens \\+ .max_new_tokens. must be|exceeds the available context size|exceeds the maximum number of tokens allowed" +
		`|input token limit|input is too long|current length is \d+ while limit is \d+`), eff: effContext},
	{name: "content-code", codes: []string{"content_filter", "content_policy_violation", "responsibleaipolicyviolation",
		"content_filter_policy"}, eff: effContent},
	{name: "content-message", message: re(`(?i)content[ _-]?(?:filter|management policy|policy violation)|responsibleaipolicyviolation` +
		`|flagged by (?:the )?moderation|blocked by content filtering`), eff: effContent},
	{name: "tgi-concurrency", codes: []string{"overloaded"}, status: 429, eff: effConcurrency},
	{name: "concurrency-message", message: re(`(?i)concurren|too many connections|maximum pending requests|no slots available|server busy`), eff: effConcurrency},
	{name: "provisioned-throughput", message: re(`(?i)exceeded the provisioned throughput`), eff: effRateNoRetry},
	{name: "model-not-ready", codes: []string{"modelnotreadyexception"}, eff: effWarming},
	{name: "overload-code", codes: []string{"overloaded_error", "server_is_overloaded", "capacity_exceeded",
		"service_unavailable_error", "serviceunavailableexception", "unavailable"}, eff: effOverload},
	{name: "overload-message", message: re(`(?i)overloaded|capacity exceeded|\bresource exhausted\b|out of capacity|high demand`), eff: effOverload},
	{name: "rate-code", codes: []string{"rate_limit_exceeded", "rate_limit_error", "rate_limited", "throttlingexception",
		"throttling", "throttled", "toomanyrequestsexception", "dynamic_request_limited", "dynamic_token_limited",
		"slow_down", "resource_exhausted", "ratelimitexceeded"}, eff: effRate},
	{name: "rate-message", message: re(`(?i)rate[\s_-]*limit|too many requests|too many tokens|throttl`), eff: effRate},
	{name: "auth-code", codes: []string{"authentication_error", "permission_error", "accessdeniedexception",
		"invalid_api_key", "permission_denied", "unauthenticated", "unauthorizedexception"}, eff: effAuth},
	{name: "not-found-code", codes: []string{"not_found_error", "model_not_found", "resourcenotfoundexception",
		"deploymentnotfound"}, eff: effConfig},
	{name: "timeout-code", codes: []string{"modeltimeoutexception", "deadline_exceeded"}, eff: effTimeout},
	{name: "server-code", codes: []string{"api_error", "server_error", "internalserverexception", "internal",
		"internalfailure", "modelerrorexception", "modelstreamerrorexception"}, eff: effServer},
}
