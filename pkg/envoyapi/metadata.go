package envoyapi

import (
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA
// struct, which Envoy stores under envoy.filters.http.ratelimit:
//
//	domain               the request's domain
//	descriptors          [{entries: ["key=value", …], hitsAddend?}] for
//	                     every descriptor, in order
//	hitsAddend           the request-level hits_addend, when not 0
//	metadata             the descriptors' configured metadata, merged
//	                     over the descriptors that passed (status OK and
//	                     limited), in order: nested mappings merge, and
//	                     otherwise the first descriptor's value stays
//	quotaModeViolations  indices of the quota-mode descriptors over their
//	                     limit, when there are any
func dynamicMetadata(req *ratelimitv3.RateLimitRequest, b *batch) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.Domain)}
	ds := make([]*structpb.Value, len(req.Descriptors))
	for i, d := range req.Descriptors {
		ds[i] = structpb.NewStructValue(descriptorStruct(d))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if req.HitsAddend != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	var violations []*structpb.Value
	for i := range b.plans {
		p := &b.plans[i]
		switch {
		case p.kind != limited:
		case b.over(p):
			if p.quota {
				violations = append(violations, structpb.NewNumberValue(float64(i)))
			}
		case p.override == nil && p.limit.Metadata != nil:
			if s, err := structpb.NewStruct(p.limit.Metadata); err == nil {
				mergeStruct(merged, s)
			}
		}
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	return &structpb.Struct{Fields: fields}
}

func descriptorStruct(d *rlcommonv3.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, len(d.Entries))
	for i, e := range d.Entries {
		entries[i] = structpb.NewStringValue(e.Key + "=" + e.Value)
	}
	f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if h := d.GetHitsAddend(); h != nil {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h.Value))
	}
	return &structpb.Struct{Fields: f}
}

// mergeStruct adds src's fields to dst: a field both hold as mappings is
// merged, any other field dst holds is kept.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if cs, vs := cur.GetStructValue(), v.GetStructValue(); cs != nil && vs != nil {
			mergeStruct(cs, vs)
		}
	}
}
