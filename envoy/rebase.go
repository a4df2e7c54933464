package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// RelativeLocalAgent makes the unix socket path of a bootstrap's
// local_agent cluster relative to the socket's directory, which it returns:
// a sidecar that drops privileges moves there first, so Envoy reaches the
// socket even when a directory above it (the agent's data dir) is closed to
// the proxy user. A bootstrap whose local_agent is not at an absolute pipe
// path is returned unchanged with dir "". Fields are found under their
// proto JSON and their proto names; numbers keep their exact text.
func RelativeLocalAgent(bootstrap []byte) (dir string, out []byte, err error) {
	dec := json.NewDecoder(bytes.NewReader(bootstrap))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return "", nil, fmt.Errorf("%w: bootstrap is not a JSON object: %v", ErrInvalidConfig, err)
	}
	pipe := localAgentPipe(root)
	path, _ := pipe["path"].(string)
	if !filepath.IsAbs(path) {
		return "", bootstrap, nil
	}
	pipe["path"] = filepath.Base(path)
	out, err = json.MarshalIndent(root, "", "  ")
	if err != nil {
		return "", nil, fmt.Errorf("failed to encode bootstrap: %w", err)
	}
	return filepath.Dir(path), out, nil
}

// localAgentPipe returns the pipe object of the local_agent cluster's
// first endpoint, or nil.
func localAgentPipe(root map[string]any) map[string]any {
	static := object(field(root, "staticResources", "static_resources"))
	clusters, _ := field(static, "clusters", "clusters").([]any)
	for _, c := range clusters {
		cluster := object(c)
		if cluster["name"] != LocalAgentCluster {
			continue
		}
		la := object(field(cluster, "loadAssignment", "load_assignment"))
		eps, _ := field(la, "endpoints", "endpoints").([]any)
		for _, ep := range eps {
			lbs, _ := field(object(ep), "lbEndpoints", "lb_endpoints").([]any)
			for _, lb := range lbs {
				addr := object(field(object(field(object(lb), "endpoint", "endpoint")), "address", "address"))
				if pipe := object(field(addr, "pipe", "pipe")); pipe != nil {
					return pipe
				}
			}
		}
	}
	return nil
}

func field(m map[string]any, jsonName, protoName string) any {
	if v, ok := m[jsonName]; ok {
		return v
	}
	return m[protoName]
}

func object(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
