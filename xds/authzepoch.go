package xds

import (
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet/meshlet/authz"
)

// EpochSource is the authorization service's epoch (authz.Service
// implements it): the built-in proxies cache the allows marked with the
// current epoch, which this server publishes to them as the RTDS resource
// authz.EpochResource (see authz/epoch.go and sidecar/authzcache.go).
// Envoy never subscribes to it.
type EpochSource interface {
	// SubscribeEpoch calls fn with the current epoch and every later
	// one, in order, one call at a time.
	SubscribeEpoch(fn func(epoch string)) (cancel func())
}

// watchAuthzEpoch publishes every epoch as it comes (the callbacks are
// serialized by the source, so the last one published is the current one).
func (s *Server) watchAuthzEpoch(src EpochSource) {
	s.unsubs = append(s.unsubs, src.SubscribeEpoch(s.publishAuthzEpoch))
}

func (s *Server) publishAuthzEpoch(epoch string) {
	rt := &runtimev3.Runtime{Name: authz.EpochResource, Layer: &structpb.Struct{Fields: map[string]*structpb.Value{
		authz.EpochKey: structpb.NewStringValue(epoch),
	}}}
	if err := s.cache.publish(resource.RuntimeType, []op{{name: authz.EpochResource, msg: rt}}); err != nil {
		s.log.Error("failed to publish the authorization epoch", "error", err)
	}
}
