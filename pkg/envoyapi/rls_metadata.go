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
//	                     over the descriptors that passed (status OK, not
//	                     in a quota group that is over), in order: nested
//	                     mappings merge, otherwise the first value stays
//	passedBackends       when the request has quota-mode descriptors: the
//	                     {backend_name, model_name_override} of those
//	                     passed descriptors that have them, once per group
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
	var violations, backends []*structpb.Value
	seen := map[string]bool{}
	for i := range b.plans {
		p := &b.plans[i]
		switch {
		case p.kind == unlimited:
			continue
		case b.over(p):
			if p.quota {
				violations = append(violations, structpb.NewNumberValue(float64(i)))
			}
			continue
		case p.quota && b.groupOver(p.group):
			continue // passed, but its model's quota is spent: not offered
		}
		if p.kind == limited && p.override == nil && p.limit.Metadata != nil {
			if s, err := structpb.NewStruct(p.limit.Metadata); err == nil {
				mergeStruct(merged, s)
			}
		}
		if len(b.groups) > 0 {
			backends = appendBackend(backends, seen, req.Descriptors[i])
		}
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	if len(backends) > 0 {
		fields["passedBackends"] = structpb.NewListValue(&structpb.ListValue{Values: backends})
	}
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	return &structpb.Struct{Fields: fields}
}

// appendBackend adds a passed descriptor's backend_name and
// model_name_override, once per quota group, when it has them.
func appendBackend(out []*structpb.Value, seen map[string]bool, d *rlcommonv3.RateLimitDescriptor) []*structpb.Value {
	backend, model := backendModel(d)
	key := quotaGroupKey(d)
	if (backend == "" && model == "") || seen[key] {
		return out
	}
	seen[key] = true
	return append(out, structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		backendNameKey: structpb.NewStringValue(backend), modelOverrideKey: structpb.NewStringValue(model),
	}}))
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
