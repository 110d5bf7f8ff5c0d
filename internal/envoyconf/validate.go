// Package envoyconf checks Envoy configuration messages the way Envoy
// loads them: every message's protoc-gen-validate rules, including the
// messages packed in Any values, which ValidateAll alone does not open.
// Tests of the shipped manifests use it.
package envoyconf

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validator is what protoc-gen-validate generates on every message.
type validator interface{ ValidateAll() error }

// Validate validates m and every message inside it, unpacking Any values,
// and returns every problem found, each prefixed with its path from where.
func Validate(m protoreflect.Message, where string) []error {
	var errs []error
	walk(m, where, &errs)
	return errs
}

func walk(m protoreflect.Message, where string, errs *[]error) {
	if v, ok := m.Interface().(validator); ok {
		if err := v.ValidateAll(); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %s: %w", where, a.GetTypeUrl(), err))
			return
		}
		walk(inner.ProtoReflect(), where+"("+a.GetTypeUrl()+")", errs)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		name := where + "." + string(fd.Name())
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				walk(v.List().Get(i).Message(), name, errs)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), name+"["+k.String()+"]", errs)
					return true
				})
			}
		default:
			walk(v.Message(), name, errs)
		}
		return true
	})
}
