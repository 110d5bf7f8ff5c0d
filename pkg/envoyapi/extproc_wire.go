package envoyapi

import (
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Attributes Envoy's ext_proc filter sends, under attrNamespace.
const (
	attrNamespace   = "envoy.filters.http.ext_proc"
	attrCluster     = "xds.cluster_name"
	attrCodeDetails = "response.code_details"
)

// headerMap is a message's header list as Envoy sends it: lower-case keys,
// values in raw_value.
type headerMap []*corev3.HeaderValue

func headersOf(h *extprocv3.HttpHeaders) headerMap { return h.GetHeaders().GetHeaders() }

// rawValue reads a header's value from raw_value, where Envoy puts it,
// falling back to value.
func rawValue(hv *corev3.HeaderValue) string {
	if len(hv.GetRawValue()) > 0 {
		return string(hv.GetRawValue())
	}
	return hv.GetValue()
}

// get returns the first value of name.
func (h headerMap) get(name string) (string, bool) {
	for _, hv := range h {
		if strings.EqualFold(hv.GetKey(), name) {
			return rawValue(hv), true
		}
	}
	return "", false
}

// Values returns every value of name, so a headerMap is a
// retryhint.Headers.
func (h headerMap) Values(name string) []string {
	var out []string
	for _, hv := range h {
		if strings.EqualFold(hv.GetKey(), name) {
			out = append(out, rawValue(hv))
		}
	}
	return out
}

// status is the :status of a response, 0 when absent or malformed.
func (h headerMap) status() int {
	v, _ := h.get(hdrStatus)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

// isJSON reports whether the content-type is JSON (application/json or a
// +json type).
func (h headerMap) isJSON() bool {
	ct, _ := h.get(hdrContentType)
	ct, _, _ = strings.Cut(strings.ToLower(ct), ";")
	ct = strings.TrimSpace(ct)
	return ct == "application/json" || strings.HasSuffix(ct, "+json")
}

// internal lists the distinct x-resil-* header names present.
func (h headerMap) internal() []string {
	var out []string
	for _, hv := range h {
		k := strings.ToLower(hv.GetKey())
		if strings.HasPrefix(k, internalPrefix) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// mutation builds a HeaderMutation by Envoy's rules: values in raw_value
// only, overwrite with append unset (AppendAction is also set to
// overwrite, which readers of either field agree on).
type mutation struct {
	set    []*corev3.HeaderValueOption
	remove []string
}

func (m *mutation) put(key, value string) {
	m.set = append(m.set, &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	})
}

func (m *mutation) del(key string) { m.remove = append(m.remove, key) }

// proto is the mutation, nil when it changes nothing.
func (m *mutation) proto() *extprocv3.HeaderMutation {
	if len(m.set) == 0 && len(m.remove) == 0 {
		return nil
	}
	return &extprocv3.HeaderMutation{SetHeaders: m.set, RemoveHeaders: m.remove}
}

// common wraps a mutation (and an optional body) in a CommonResponse; nil
// when there is nothing to say. clearRoute is only set together with a
// header mutation, the only way Envoy honours it.
func common(m *mutation, body []byte, clearRoute bool) *extprocv3.CommonResponse {
	hm := m.proto()
	if hm == nil && body == nil {
		return nil
	}
	cr := &extprocv3.CommonResponse{HeaderMutation: hm, ClearRouteCache: clearRoute && hm != nil}
	if body != nil {
		cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
	}
	return cr
}

// headersResponse answers a headers message of the request or response
// path.
func headersResponse(response bool, cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	hr := &extprocv3.HeadersResponse{Response: cr}
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: hr}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: hr}}
}

// bodyResponse answers a body message of the request or response path.
func bodyResponse(response bool, cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: cr}
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
}

// bufferResponseBody is the mode_override that asks Envoy to send the
// whole response body; header modes stay as configured.
func bufferResponseBody() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
		ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED,
	}
}

// attributeOf reads one attribute Envoy sent with a message, "" if absent.
func attributeOf(req *extprocv3.ProcessingRequest, name string) string {
	return req.GetAttributes()[attrNamespace].GetFields()[name].GetStringValue()
}

// bodyWait holds a role's routing decision until Envoy sends the buffered
// request body, when it sends one.
type bodyWait struct{ awaiting bool }

// begin reports whether the decision waits for the body. Without a
// protocol_config the filter is taken to be configured as shipped:
// request body BUFFERED.
func (w *bodyWait) begin(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) bool {
	pc := req.GetProtocolConfig()
	m := pc.GetRequestBodyMode()
	w.awaiting = !h.GetEndOfStream() && (pc == nil || m == extprocfilterv3.ProcessingMode_BUFFERED ||
		m == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL)
	return w.awaiting
}

// body routes on the awaited body; any other body message (streamed
// chunks, or a body that was not awaited) passes untouched.
func (w *bodyWait) body(b *extprocv3.HttpBody,
	route func(body []byte, inBody bool) (*extprocv3.ProcessingResponse, error)) (*extprocv3.ProcessingResponse, error) {
	if !w.awaiting {
		return bodyResponse(false, nil), nil
	}
	w.awaiting = false
	return route(b.GetBody(), true)
}

// routeAnswer answers the request message that completed a routing
// decision: the mutation m, and for a buffered body that names another
// model than the hop's, the body with only its model replaced (or the
// body as given when the caller rewrote it otherwise). The
// content-length matches the body sent: the new one, or the body itself
// when contentLen, the header as it arrived ("" when unknown), does not.
func routeAnswer(m *mutation, body []byte, model modelField, hopModel, contentLen string, inBody, clearRoute, rewritten bool) *extprocv3.ProcessingResponse {
	var newBody []byte
	switch {
	case inBody && len(model.spans) > 0 && model.value != hopModel:
		newBody = model.withModel(body, hopModel)
		m.put(hdrContentLen, strconv.Itoa(len(newBody)))
	case inBody && rewritten:
		newBody = body
		m.put(hdrContentLen, strconv.Itoa(len(newBody)))
	case inBody && contentLen != "" && contentLen != strconv.Itoa(len(body)):
		m.put(hdrContentLen, strconv.Itoa(len(body)))
	}
	cr := common(m, newBody, clearRoute)
	if inBody {
		return bodyResponse(false, cr)
	}
	return headersResponse(false, cr)
}
