package xds

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validateDeep runs protoc-gen-validate's ValidateAll on m and, since
// ValidateAll stops at packed Any fields (filter and transport socket
// typed_config), unpacks every nested Any and validates it the same way.
func validateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", proto.MessageName(m), err)
		}
	}
	return walkAnys(m.ProtoReflect())
}

// walkAnys visits every message reachable from m and validates the content
// of each Any it finds.
func walkAnys(m protoreflect.Message) error {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("failed to unpack %s: %w", a.GetTypeUrl(), err)
		}
		return validateDeep(inner)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = walkAnys(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = walkAnys(mv.Message())
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = walkAnys(v.Message())
		}
		return err == nil
	})
	return err
}
