// Package envoyvalidate checks Envoy protos the way Envoy itself would at
// load time: ValidateAll() (protoc-gen-validate constraints) on the message
// and, recursively, on every message packed in an Any field (typed_config of
// filters and transport sockets), which ValidateAll does not look into.
package envoyvalidate

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

type validatorAll interface{ ValidateAll() error }

// All validates m and every message nested in it, unpacking Any fields.
// ValidateAll already covers a message's whole subtree up to its Any
// fields, so it runs once on m and once on each unpacked Any, keeping the
// cost linear in the message size (xds calls this on every compiled proxy).
func All(m proto.Message) error {
	return walk(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().FullName()), true)
}

func walk(m protoreflect.Message, path string, root bool) error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: failed to unpack %s: %w", path, a.GetTypeUrl(), err)
		}
		return walk(inner.ProtoReflect(), path+"<"+string(inner.ProtoReflect().Descriptor().FullName())+">", true)
	}
	if v, ok := m.Interface().(validatorAll); ok && root {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := val.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), false)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				val.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					err = walk(v.Message(), fmt.Sprintf("%s[%v]", p, k.Interface()), false)
					return err == nil
				})
			}
		default:
			err = walk(val.Message(), p, false)
		}
		return err == nil
	})
	return err
}
