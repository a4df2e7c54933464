package sidecar

import (
	"errors"
	"fmt"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// errUpgradeConfig marks an upgrade_configs list Envoy would reject.
var errUpgradeConfig = errors.New("invalid upgrade_configs")

// upgradeRule is one decoded upgrade_configs entry (HCM or route level):
// the upgrade type, lower case, and whether it is enabled (the default).
type upgradeRule struct {
	kind    string
	enabled bool
}

// upgradeRules are the upgrade_configs of an HCM or of a route.
type upgradeRules []upgradeRule

// find returns the rule for upgrade type kind (matched without regard to
// case, as Envoy does), or nil.
func (rs upgradeRules) find(kind string) *upgradeRule {
	for i := range rs {
		if strings.EqualFold(rs[i].kind, kind) {
			return &rs[i]
		}
	}
	return nil
}

// upgradeAllowed reports whether a request asking to upgrade to kind may
// be relayed, by Envoy's rules: a route's entry decides when it has one
// (disabled refuses, enabled allows even if the HCM does not list the
// type); otherwise the HCM must list the type, enabled.
func upgradeAllowed(hcm, rt upgradeRules, kind string) bool {
	if r := rt.find(kind); r != nil {
		return r.enabled
	}
	r := hcm.find(kind)
	return r != nil && r.enabled
}

// decodeHCMUpgrades decodes an HCM's upgrade_configs. A custom filter
// chain for an upgrade is not supported: the upgrade would go through the
// HCM's filters instead, which is not what the configuration asks.
func decodeHCMUpgrades(ucs []*hcmv3.HttpConnectionManager_UpgradeConfig) (upgradeRules, error) {
	var out upgradeRules
	for _, uc := range ucs {
		if len(uc.GetFilters()) > 0 {
			return nil, fmt.Errorf("%w: upgrade %q: filters are not supported", errUpgradeConfig, uc.GetUpgradeType())
		}
		r, err := upgradeEntry(out, uc.GetUpgradeType(), uc.GetEnabled().GetValue() || uc.GetEnabled() == nil)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeRouteUpgrades decodes a route action's upgrade_configs.
func decodeRouteUpgrades(ucs []*routev3.RouteAction_UpgradeConfig) (upgradeRules, error) {
	var out upgradeRules
	for _, uc := range ucs {
		if uc.GetConnectConfig() != nil {
			return nil, fmt.Errorf("%w: upgrade %q: connect_config is not supported", errUpgradeConfig, uc.GetUpgradeType())
		}
		r, err := upgradeEntry(out, uc.GetUpgradeType(), uc.GetEnabled().GetValue() || uc.GetEnabled() == nil)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// upgradeEntry checks one entry against those before it: a type is
// required and may appear once (Envoy refuses duplicates, whatever their
// case).
func upgradeEntry(prior upgradeRules, kind string, enabled bool) (upgradeRule, error) {
	if kind == "" || !validValueBytes([]byte(kind)) {
		return upgradeRule{}, fmt.Errorf("%w: upgrade_type %q is invalid", errUpgradeConfig, kind)
	}
	if prior.find(kind) != nil {
		return upgradeRule{}, fmt.Errorf("%w: upgrade %q appears twice", errUpgradeConfig, kind)
	}
	return upgradeRule{kind: strings.ToLower(kind), enabled: enabled}, nil
}
