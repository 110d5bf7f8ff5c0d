package envoyapi

import (
	"cmp"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RequestBounds bound what one ShouldRateLimit request may ask of the
// service. A request beyond them is refused with InvalidArgument naming
// the field; nothing of it is decided or kept. The zero value of each
// field is its default.
type RequestBounds struct {
	// MaxDescriptors per request (default 64).
	MaxDescriptors int
	// MaxEntries over all descriptors of a request (default 512).
	MaxEntries int
	// MaxValueBytes of an entry's key or value (default 4 096): a key is
	// kept per distinct value, so the size of a value is memory held.
	MaxValueBytes int
	// MaxOverridePeriod is the longest window a descriptor's limit
	// override may ask for (default 366 days): a key lives, and its Redis
	// record is kept, as long as its window.
	MaxOverridePeriod time.Duration
}

// Defaults of RequestBounds.
const (
	DefaultMaxDescriptors    = 64
	DefaultMaxEntries        = 512
	DefaultMaxValueBytes     = 4096
	DefaultMaxOverridePeriod = 366 * 24 * time.Hour
)

// WithRequestBounds sets the RLS's RequestBounds.
func WithRequestBounds(b RequestBounds) Option {
	return func(o *options) { o.bounds = b.withDefaults() }
}

func (b RequestBounds) withDefaults() RequestBounds {
	if b.MaxDescriptors <= 0 {
		b.MaxDescriptors = DefaultMaxDescriptors
	}
	if b.MaxEntries <= 0 {
		b.MaxEntries = DefaultMaxEntries
	}
	if b.MaxValueBytes <= 0 {
		b.MaxValueBytes = DefaultMaxValueBytes
	}
	if b.MaxOverridePeriod <= 0 {
		b.MaxOverridePeriod = DefaultMaxOverridePeriod
	}
	return b
}

// validate checks what every request must be, and the bounds.
func (b *RequestBounds) validate(req *ratelimitv3.RateLimitRequest) error {
	if path, bad := invalidUTF8(req); bad {
		return fmt.Errorf("%w: %s: not valid UTF-8", errBadRequest, path)
	}
	switch {
	case req.GetDomain() == "":
		return fmt.Errorf("%w: empty domain", errBadRequest)
	case len(req.GetDescriptors()) == 0:
		return fmt.Errorf("%w: no descriptors", errBadRequest)
	case len(req.Descriptors) > b.MaxDescriptors:
		return fmt.Errorf("%w: descriptors: %d, above the maximum %d", errBadRequest, len(req.Descriptors), b.MaxDescriptors)
	case len(req.Domain) > b.MaxValueBytes:
		return fmt.Errorf("%w: domain: %d bytes, above the maximum %d", errBadRequest, len(req.Domain), b.MaxValueBytes)
	}
	entries := 0
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return fmt.Errorf("%w: descriptors[%d]: no entries", errBadRequest, i)
		}
		if entries += len(d.Entries); entries > b.MaxEntries {
			return fmt.Errorf("%w: descriptors[%d]: more than %d entries in the request", errBadRequest, i, b.MaxEntries)
		}
		for j, e := range d.Entries {
			for _, f := range [2]struct{ what, s string }{{"key", e.GetKey()}, {"value", e.GetValue()}} {
				if len(f.s) > b.MaxValueBytes {
					return fmt.Errorf("%w: descriptors[%d].entries[%d].%s: %d bytes, above the maximum %d",
						errBadRequest, i, j, f.what, len(f.s), b.MaxValueBytes)
				}
			}
		}
	}
	return nil
}

// ServerCodec is the gRPC server option the services of this package
// want: the standard protobuf codec, except that a RateLimitRequest the
// protobuf decoder refuses for invalid UTF-8 (a caller's mistake, which
// gRPC would answer Internal) is decoded with the offending bytes as '?'
// and marked, so ShouldRateLimit answers InvalidArgument naming the
// field; nothing of it is decided.
func ServerCodec() grpc.ServerOption {
	return grpc.ForceServerCodecV2(rlsCodec{encoding.GetCodecV2("proto")})
}

type rlsCodec struct{ encoding.CodecV2 }

// Unmarshal decodes data into v; see ServerCodec.
func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	req, ok := v.(*ratelimitv3.RateLimitRequest)
	if err == nil || !ok || !strings.Contains(err.Error(), "invalid UTF-8") {
		return err
	}
	raw := data.Materialize()
	path, ok := sanitizeUTF8(raw, req.ProtoReflect().Descriptor(), "")
	if !ok {
		return err
	}
	proto.Reset(req)
	if uerr := proto.Unmarshal(raw, req); uerr != nil {
		return err
	}
	req.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(req.ProtoReflect().GetUnknown(),
		invalidUTF8Field, protowire.BytesType), []byte(path)))
	return nil
}

// invalidUTF8Field is the unknown field rlsCodec marks a request with: a
// number no Envoy message uses, holding the path of the bad field.
const invalidUTF8Field protowire.Number = 536_870_000

// sanitizeUTF8 replaces, in place, every byte of the wire message b (of
// descriptor md) that makes a string field invalid UTF-8 by '?', and
// returns the path of the first such field (as "descriptors[0].entries[1].value").
func sanitizeUTF8(b []byte, md protoreflect.MessageDescriptor, prefix string) (string, bool) {
	first, counts := "", map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return first, first != ""
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return first, first != ""
		}
		if fd := md.Fields().ByNumber(num); fd != nil && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b[:m])
			path := prefix + string(fd.Name())
			if fd.IsList() {
				path = fmt.Sprintf("%s[%d]", path, counts[num])
			}
			counts[num]++
			switch {
			case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
				fixUTF8(v)
				first = cmp.Or(first, path)
			case fd.Kind() == protoreflect.MessageKind && k > 0:
				if p, ok := sanitizeUTF8(v, fd.Message(), path+"."); ok {
					first = cmp.Or(first, p)
				}
			}
		}
		b = b[m:]
	}
	return first, first != ""
}

// fixUTF8 overwrites the bytes of invalid sequences in v with '?'.
func fixUTF8(v []byte) {
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && size <= 1 {
			v[i] = '?'
			size = 1
		}
		i += size
	}
}

// invalidUTF8 reports the path rlsCodec marked req with, if any.
func invalidUTF8(req *ratelimitv3.RateLimitRequest) (string, bool) {
	for b := req.ProtoReflect().GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return "", false
		}
		if num == invalidUTF8Field && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[:m])
			return string(v), true
		}
		b = b[m:]
	}
	return "", false
}
