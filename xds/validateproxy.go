package xds

import "github.com/meshlet/meshlet/catalog"

// ValidateProxy builds a connect-proxy instance's resources exactly as the
// server would and returns the first problem (wrapping
// ErrInvalidProxyConfig): a bad protocol or timeout, escape-hatch JSON that
// does not parse or fails Envoy's validation. The client calls it before
// registering a sidecar, so a bad proxy config fails the allocation with a
// clear message instead of leaving a proxy without configuration.
func ValidateProxy(inst catalog.ServiceInstance, datacenter, trustDomain string) error {
	_, err := builder{dc: datacenter, trustDomain: trustDomain}.proxy(inst)
	return err
}
