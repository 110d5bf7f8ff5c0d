package envoyapi

import (
	"strings"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Quota groups, as envoyproxy/ratelimit forms them: the quota-mode
// descriptors of one model (the same backend_name and
// model_name_override entries, AI Gateway's keys) are one group, over as
// soon as any of them is (a tenant's bucket or the model's default one);
// a request is denied on quota only when every group is over, so it can
// still fail over to another model. A descriptor without those entries
// is a group by its entries alone.
const (
	backendNameKey   = "backend_name"
	modelOverrideKey = "model_name_override"
)

type quotaGroup struct {
	key  string
	over bool
}

// quotaGroupKey names a descriptor's quota group.
func quotaGroupKey(d *rlcommonv3.RateLimitDescriptor) string {
	backend, model := backendModel(d)
	if backend != "" || model != "" {
		return backend + "|" + model
	}
	var sb strings.Builder
	for _, e := range d.Entries {
		sb.WriteString(e.Key)
		sb.WriteByte('=')
		sb.WriteString(e.Value)
		sb.WriteByte(';')
	}
	return sb.String()
}

// backendModel returns a descriptor's backend_name and
// model_name_override values.
func backendModel(d *rlcommonv3.RateLimitDescriptor) (backend, model string) {
	for _, e := range d.Entries {
		switch e.Key {
		case backendNameKey:
			backend = e.Value
		case modelOverrideKey:
			model = e.Value
		}
	}
	return backend, model
}

// addToGroup records a quota descriptor's verdict in its group.
func (b *batch) addToGroup(key string, over bool) {
	for i := range b.groups {
		if b.groups[i].key == key {
			b.groups[i].over = b.groups[i].over || over
			return
		}
	}
	b.groups = append(b.groups, quotaGroup{key: key, over: over})
}

// groupOver reports whether the quota group key is over; overallOver must
// have run.
func (b *batch) groupOver(key string) bool {
	for _, g := range b.groups {
		if g.key == key {
			return g.over
		}
	}
	return false
}
