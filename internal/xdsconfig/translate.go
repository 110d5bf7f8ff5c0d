package xdsconfig

import (
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// The YAML form of a RateLimitConfig: the envoyproxy/ratelimit file it
// stands for, which the policy loader reads like any file. Booleans are
// written only when true, as a file would; an unlimited rate_limit leaves
// out the unit and count it does not set, so the loader sees what
// envoyproxy/ratelimit's own conversion gives it.

type yamlDoc struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value,omitempty"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
	QuotaMode      bool             `yaml:"quota_mode,omitempty"`
	Metadata       *yaml.Node       `yaml:"metadata,omitempty"`
}

type yamlRateLimit struct {
	Name            string        `yaml:"name,omitempty"`
	Unit            string        `yaml:"unit,omitempty"`
	RequestsPerUnit *uint32       `yaml:"requests_per_unit,omitempty"`
	Unlimited       bool          `yaml:"unlimited,omitempty"`
	Replaces        []yamlReplace `yaml:"replaces,omitempty"`
}

type yamlReplace struct {
	Name string `yaml:"name"`
}

// toYAML renders c as a policy file.
func toYAML(c *rlsconf.RateLimitConfig) ([]byte, error) {
	ds, err := descriptors(c.GetDescriptors())
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(yamlDoc{Domain: c.GetDomain(), Descriptors: ds})
}

func descriptors(ds []*rlsconf.RateLimitDescriptor) ([]yamlDescriptor, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		kids, err := descriptors(d.GetDescriptors())
		if err != nil {
			return nil, err
		}
		out[i] = yamlDescriptor{
			Key: d.GetKey(), Value: d.GetValue(),
			RateLimit:   rateLimit(d.GetRateLimit()),
			Descriptors: kids,
			ShadowMode:  d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(),
			QuotaMode: d.GetQuotaMode(),
		}
		if m := d.GetMetadata(); m != nil {
			if out[i].Metadata, err = metadataNode(m); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// metadataNode renders a Struct as a YAML mapping whose keys are all quoted,
// so that no key is read back as YAML syntax (a "<<" merge key).
func metadataNode(m *structpb.Struct) (*yaml.Node, error) {
	var n yaml.Node
	if err := n.Encode(m.AsMap()); err != nil {
		return nil, err
	}
	quoteKeys(&n)
	return &n, nil
}

func quoteKeys(n *yaml.Node) {
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 {
			c.Tag, c.Style = "!!str", yaml.DoubleQuotedStyle
		}
		quoteKeys(c)
	}
}

func rateLimit(p *rlsconf.RateLimitPolicy) *yamlRateLimit {
	if p == nil {
		return nil
	}
	r := &yamlRateLimit{Name: p.GetName(), Unlimited: p.GetUnlimited()}
	// UNKNOWN (proto3's unset) becomes "unknown", which the loader rejects
	// for a limited rule; a number outside the enum stays a number.
	if unit := p.GetUnit(); !r.Unlimited || unit != rlsconf.RateLimitUnit_UNKNOWN {
		r.Unit = strings.ToLower(unit.String())
	}
	if rpu := p.GetRequestsPerUnit(); !r.Unlimited || rpu != 0 {
		r.RequestsPerUnit = &rpu
	}
	for _, rep := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, yamlReplace{Name: rep.GetName()})
	}
	return r
}
