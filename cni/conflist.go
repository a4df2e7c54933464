package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// cniVersion of the generated conflist: 1.0.0 supports CHECK (needed by
// Restore) and every plugin of the built-in chain.
const cniVersion = "1.0.0"

// The typed shape of the built-in conflist. Field names follow the plugins'
// documented JSON (containernetworking/plugins v1.10).
type confList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

type loopbackPlugin struct {
	Type string `json:"type"`
}

type bridgePlugin struct {
	Type         string    `json:"type"`
	Bridge       string    `json:"bridge"`
	IsGateway    bool      `json:"isGateway"`
	IPMasq       bool      `json:"ipMasq"`
	ForceAddress bool      `json:"forceAddress"`
	HairpinMode  bool      `json:"hairpinMode"`
	IPAM         hostLocal `json:"ipam"`
}

type hostLocal struct {
	Type    string        `json:"type"`
	Ranges  [][]ipamRange `json:"ranges"`
	Routes  []ipamRoute   `json:"routes"`
	DataDir string        `json:"dataDir"`
}

type ipamRange struct {
	Subnet string `json:"subnet"`
}

type ipamRoute struct {
	Dst string `json:"dst"`
}

type firewallPlugin struct {
	Type                   string `json:"type"`
	Backend                string `json:"backend"`
	IptablesAdminChainName string `json:"iptablesAdminChainName"`
}

type portmapPlugin struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
	SNAT         bool            `json:"snat"`
	Backend      string          `json:"backend"`
}

// BuildConfList returns the conflist of the "bridge" mode for cfg (after
// defaults): loopback; bridge (gateway, host-local IPAM with a default
// route); firewall (iptables, cfg.AdminChain); portmap (the portMappings
// capability). iptables backends are explicit so the rules are where
// cleanup looks for them.
//
// The list is not self-contained: masquerading is off in both plugins
// (bridge "ipMasq", portmap "snat") because the Manager writes it once per
// network instead of the plugins on every ADD (see masquerade.go): the
// outbound masquerade and the one that makes 127.0.0.1:<host port> and
// hairpin connections work. Used alone, the list gives allocations no
// outbound NAT.
func BuildConfList(cfg Config) ([]byte, error) {
	return buildConfList(cfg, true)
}

// buildConfList is BuildConfList, without the portmap plugin unless
// withPortmap: the Manager uses that list for allocations that map no
// port, where portmap's ADD only hands its input on (one plugin exec per
// ADD saved) and its DEL would only look for chains that are not there
// (a dozen iptables execs per DEL saved). DEL and CHECK use the list the
// ADD cached, so each allocation keeps the one it was set up with.
func buildConfList(cfg Config, withPortmap bool) ([]byte, error) {
	cfg = cfg.withDefaults()
	list := confList{
		CNIVersion: cniVersion,
		Name:       cfg.NetworkName,
		Plugins: []any{
			loopbackPlugin{Type: "loopback"},
			bridgePlugin{
				Type:         "bridge",
				Bridge:       cfg.BridgeName,
				IsGateway:    true,
				IPMasq:       false, // meshlet masquerades the subnet (masquerade.go)
				ForceAddress: true,
				HairpinMode:  false,
				IPAM: hostLocal{
					Type:    "host-local",
					Ranges:  [][]ipamRange{{{Subnet: cfg.Subnet}}},
					Routes:  []ipamRoute{{Dst: "0.0.0.0/0"}},
					DataDir: ipamDir(cfg),
				},
			},
			firewallPlugin{Type: "firewall", Backend: "iptables", IptablesAdminChainName: cfg.AdminChain},
			portmapPlugin{
				Type:         "portmap",
				Capabilities: map[string]bool{"portMappings": true},
				SNAT:         false, // meshlet masquerades host port traffic (masquerade.go)
				Backend:      "iptables",
			},
		},
	}
	if !withPortmap {
		list.Plugins = list.Plugins[:len(list.Plugins)-1]
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("failed to marshal conflist: %w", err)
	}
	return data, nil
}

// loadNamedConfList loads the conflist of mode cni/<name> from dir: the
// file <name>.conflist if present, else the conflist whose "name" is name.
func loadNamedConfList(dir, name string) (*libcni.NetworkConfigList, error) {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return nil, newError(ErrUnsupportedMode, fmt.Sprintf("network mode %q: the CNI network name must be non-empty and contain no '/'", "cni/"+name), nil)
	}
	file := filepath.Join(dir, name+".conflist")
	if _, err := os.Stat(file); err == nil {
		list, err := libcni.NetworkConfFromFile(file)
		if err != nil {
			return nil, newError(ErrInvalidConfig, fmt.Sprintf("conflist %s is invalid", file), err)
		}
		return list, nil
	}
	list, err := libcni.LoadNetworkConf(dir, name)
	if err == nil {
		return list, nil
	}
	var notFound libcni.NotFoundError
	var noConfigs libcni.NoConfigsFoundError
	if errors.As(err, &notFound) || errors.As(err, &noConfigs) {
		return nil, newError(ErrNetworkNotFound, fmt.Sprintf(
			"CNI network %q not found in %s: add %s.conflist there or set cni_config_dir", name, dir, name), nil)
	}
	return nil, newError(ErrInvalidConfig, fmt.Sprintf("failed to load CNI network %q from %s", name, dir), err)
}

// requiredPlugins lists the plugin binaries a conflist executes: each
// plugin's type and, when set, its IPAM type.
func requiredPlugins(list *libcni.NetworkConfigList) []string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, p := range list.Plugins {
		if p.Network == nil {
			continue
		}
		add(p.Network.Type)
		add(p.Network.IPAM.Type)
	}
	return names
}

// checkPlugins returns an actionable error for the first plugin binary of
// list that is absent from dir or not executable.
func checkPlugins(list *libcni.NetworkConfigList, dir string) error {
	for _, name := range requiredPlugins(list) {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() {
			return pluginMissingError(name, dir)
		}
		if fi.Mode().Perm()&0o111 == 0 {
			return newError(ErrPluginMissing, fmt.Sprintf("CNI plugin %q in %s is not executable; chmod +x it or run `make cni`", name, dir), nil)
		}
	}
	return nil
}
