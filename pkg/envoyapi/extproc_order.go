package envoyapi

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// phaseOrder refuses, per stream, the message Envoy never sends twice
// and a role must not take twice: request_headers. A stream is one HTTP
// request, whose routing decision (a slot, a token reservation) is taken
// once; a second request_headers would route again over the first
// decision, and the slot it held would never come back. Other messages
// out of order are answered as their phase says, holding nothing more.
type phaseOrder struct{ requestHeaders bool }

// admit checks req against what the stream has seen.
func (o *phaseOrder) admit(req *extprocv3.ProcessingRequest) error {
	if _, ok := req.GetRequest().(*extprocv3.ProcessingRequest_RequestHeaders); !ok {
		return nil
	}
	if o.requestHeaders {
		return fmt.Errorf("%w: request_headers twice on one stream", errBadRequest)
	}
	o.requestHeaders = true
	return nil
}
