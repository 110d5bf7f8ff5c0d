package envoyapi

import (
	"encoding/json"
	"log/slog"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/llmusage"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// maxUsageBody bounds a whole JSON response read for its usage: the
// shipped buffer limit.
const maxUsageBody = 8 << 20

// Dynamic metadata keys of the token counts, in attrNamespace: an RLS
// descriptor with apply_on_stream_done charges them through Envoy's rate
// limit filter (hits_addend %DYNAMIC_METADATA(...)%).
const (
	mdInput  = "input_tokens"
	mdOutput = "output_tokens"
	mdTotal  = "total_tokens"
)

// meterMode is how a response's usage is read.
type meterMode uint8

const (
	meterNone  meterMode = iota // no usage to read: the reservation stands
	meterJSON                   // the whole body, buffered
	meterSSE                    // a text/event-stream, chunk by chunk
	meterError                  // an error response: nothing was generated
)

// usageMeter follows one response's token usage for the downstream role:
// it reads the usage as the body passes (whole JSON or streamed events),
// then settles the reservation the walk took on the hop that reserved it
// (actual − estimate, a refund when smaller) or, when another hop of the
// cluster served, refunds it there and charges the serving hop. A stream
// cut before its usage keeps the estimate; an error response refunds it.
type usageMeter struct {
	reserved uint64
	hop      *policy.Target // where the reservation is
	served   *policy.Target // the hop that served the response
	mode     meterMode
	parser   llmusage.Parser
	streamed bool // a mid-stream error was recorded
	settled  bool
}

// isEventStream reports a text/event-stream content-type.
func (h headerMap) isEventStream() bool {
	ct, _ := h.get(hdrContentType)
	ct, _, _ = strings.Cut(strings.ToLower(ct), ";")
	return strings.TrimSpace(ct) == "text/event-stream"
}

// start picks how the response's usage is read, from its headers.
func (u *usageMeter) start(hs headerMap, status int, eos bool) {
	switch {
	case status >= 400:
		u.mode = meterError
	case status < 200 || status >= 300 || eos:
	case hs.isEventStream():
		u.mode = meterSSE
	case hs.isJSON():
		u.mode = meterJSON
	}
}

// chunk reads one response body message. whole reports a body that came
// in one message (buffered). It returns the usage once known to be
// complete: the whole JSON body's, or the stream's at its end.
func (u *usageMeter) chunk(body []byte, whole, eos bool) (llmusage.Usage, bool) {
	switch u.mode {
	case meterSSE:
		u.parser.Write(body)
		if eos {
			return u.parser.Usage(), true
		}
	case meterJSON:
		if whole {
			use, err := llmusage.ParseBody(body, maxUsageBody)
			return use, err == nil
		}
	}
	return llmusage.Usage{}, false
}

// actual is the usage to settle with: the closing report's total; the
// input alone when only that is known (Anthropic's message_start), but
// never less than the estimate; else the estimate, kept. An error
// response generated nothing.
func (u *usageMeter) actual(use llmusage.Usage) uint64 {
	switch {
	case u.mode == meterError:
		return 0
	case use.Final:
		return uint64(use.Total)
	case use.Seen:
		return max(u.reserved, uint64(use.Input))
	}
	return u.reserved
}

// settle charges the usage once.
func (d *downstream) settle(use llmusage.Usage) {
	u := &d.usage
	if u.settled || u.hop == nil {
		return
	}
	u.settled = true
	actual := u.actual(use)
	var err error
	if u.served == nil || u.served == u.hop {
		err = d.x.route.Reconcile(u.hop, u.reserved, actual)
	} else if err = d.x.route.RefundTokens(u.hop, u.reserved); err == nil {
		err = d.x.route.ChargeTokens(u.served, actual)
	}
	if err != nil {
		d.x.log.LogAttrs(d.ctx, slog.LevelWarn, "token charge failed", slog.Any("error", err))
	}
}

// streamError feeds the breakers with a stream's first error event: the
// status (200) went out already, so nothing is retried, but the failure
// counts against the serving hop as its class says.
func (d *downstream) streamError(hs headerMap) {
	u := &d.usage
	e := u.parser.Err()
	if e == nil || u.streamed || u.served == nil {
		return
	}
	u.streamed = true
	v := resilience.Classify(resilience.Input{Status: 200, Header: hs, Body: streamErrorBody(e),
		Committed: true, Now: d.x.route.Now()})
	if !v.Failed() {
		return
	}
	d.x.route.Record(u.served, v)
	d.x.metrics.verdict(d.ctx, roleDownstream, "stream_error")
	d.x.log.LogAttrs(d.ctx, slog.LevelDebug, "error event in a stream", slog.String("target", u.served.Name),
		slog.String("class", string(v.Class)), slog.String("error", e.Error()))
}

// streamErrorBody is the error event as the error body the classifier
// reads (an error object's type, code and message), whatever the event's
// own shape (Anthropic's, OpenAI's, the Responses API's).
func streamErrorBody(e *llmusage.StreamError) []byte {
	b, _ := json.Marshal(apiError{Error: apiErrorDetail{Message: e.Message, Type: e.Type, Code: e.Code}})
	return b
}

// usageMetadata is the dynamic metadata carrying a usage's counts.
func usageMetadata(use llmusage.Usage) *structpb.Struct {
	if !use.Seen {
		return nil
	}
	counts := &structpb.Struct{Fields: map[string]*structpb.Value{
		mdInput:  structpb.NewNumberValue(float64(use.Input)),
		mdOutput: structpb.NewNumberValue(float64(use.Output)),
		mdTotal:  structpb.NewNumberValue(float64(use.Total)),
	}}
	return &structpb.Struct{Fields: map[string]*structpb.Value{attrNamespace: structpb.NewStructValue(counts)}}
}

// withMetadata sets a response's dynamic metadata.
func withMetadata(resp *extprocv3.ProcessingResponse, md *structpb.Struct) *extprocv3.ProcessingResponse {
	resp.DynamicMetadata = md
	return resp
}
