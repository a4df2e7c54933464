package template

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/template"

	"github.com/meshlet/meshlet/catalog"
)

// Sentinels of the functions meshlet cannot serve.
var (
	ErrNoKV        = errors.New("no KV store in meshlet")
	ErrNoVault     = errors.New("no Vault integration in meshlet")
	ErrNoVariables = errors.New("no Nomad variables in meshlet")
	ErrNoCatalog   = errors.New("no service catalog on this agent")
)

// Catalog is the service data templates read; *catalog.Catalog is one.
type Catalog interface {
	Service(name string) []catalog.ServiceInstance
	Services() map[string][]string
	Subscribe(fn func(catalog.Change)) (cancel func())
}

// ServiceTags is a service's tags, with consul-template's helpers.
type ServiceTags []string

// Contains reports whether the tags hold t.
func (s ServiceTags) Contains(t string) bool { return slices.Contains(s, t) }

// HealthService is one instance returned by `service`, with
// consul-template's field names.
type HealthService struct {
	Node           string
	NodeID         string
	NodeAddress    string
	NodeDatacenter string
	Address        string
	ID             string
	Name           string
	Kind           string
	Tags           ServiceTags
	ServiceMeta    map[string]string
	Port           int
	Status         string
}

// CatalogSnippet is one entry of `services`.
type CatalogSnippet struct {
	Name string
	Tags ServiceTags
}

// NomadService is one entry of `nomadService`, with the fields of Nomad's
// service registrations.
type NomadService struct {
	ID          string
	ServiceName string
	Namespace   string
	NodeID      string
	Datacenter  string
	JobID       string
	AllocID     string
	Tags        ServiceTags
	Address     string
	Port        int
}

// renderCtx is what one render reads; it records what the template waits
// for (missing), the services it read (whose changes re-render it) and
// whether it read files (which are polled).
type renderCtx struct {
	cat Catalog
	env map[string]string
	// lookup resolves what env lacks: node attributes and meta
	// ("attr.kernel.name", "node.unique.name", "meta.x"), as Nomad's
	// template env does; nil resolves nothing.
	lookup   func(string) (string, bool)
	taskDir  string
	nodeName string
	// strict: an empty service is missing data (first render).
	strict   bool
	missing  []string
	usesFile bool
	// readSvcs: the service names read; readAll: the list of every
	// service was read (`services`), which any change can alter.
	readSvcs map[string]bool
	readAll  bool
}

// readService records that the render read service name.
func (r *renderCtx) readService(name string) {
	if r.readSvcs == nil {
		r.readSvcs = map[string]bool{}
	}
	r.readSvcs[name] = true
}

func (r *renderCtx) funcs() template.FuncMap {
	return template.FuncMap{
		"env":          r.envVar,
		"service":      r.service,
		"services":     r.services,
		"nomadService": r.nomadService,
		"file":         r.file,
		"key":          func(string) (string, error) { return "", fmt.Errorf("key: %w", ErrNoKV) },
		"keyOrDefault": func(string, string) (string, error) { return "", fmt.Errorf("keyOrDefault: %w", ErrNoKV) },
		"keyExists":    func(string) (bool, error) { return false, fmt.Errorf("keyExists: %w", ErrNoKV) },
		"ls":           func(string) (any, error) { return nil, fmt.Errorf("ls: %w", ErrNoKV) },
		"tree":         func(string) (any, error) { return nil, fmt.Errorf("tree: %w", ErrNoKV) },
		"secret":       func(...any) (any, error) { return nil, fmt.Errorf("secret: %w", ErrNoVault) },
		"secrets":      func(string) (any, error) { return nil, fmt.Errorf("secrets: %w", ErrNoVault) },
		"pkiCert":      func(...any) (any, error) { return nil, fmt.Errorf("pkiCert: %w", ErrNoVault) },
		"nomadVar":     func(string) (any, error) { return nil, fmt.Errorf("nomadVar: %w", ErrNoVariables) },
		"nomadVarList": func(...string) (any, error) { return nil, fmt.Errorf("nomadVarList: %w", ErrNoVariables) },
		"nomadVarExists": func(string) (bool, error) {
			return false, fmt.Errorf("nomadVarExists: %w", ErrNoVariables)
		},
		"toJSON":       toJSON,
		"toJSONPretty": toJSONPretty,
		"parseJSON":    parseJSON,
		"split":        func(sep, s string) []string { return strings.Split(s, sep) },
		"join":         func(sep string, a []string) string { return strings.Join(a, sep) },
		"toLower":      strings.ToLower,
		"toUpper":      strings.ToUpper,
		"trimSpace":    strings.TrimSpace,
		"replaceAll":   func(from, to, s string) string { return strings.ReplaceAll(s, from, to) },
		"contains":     contains,
		"base64Encode": func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"base64Decode": func(s string) (string, error) {
			b, err := base64.StdEncoding.DecodeString(s)
			return string(b), err
		},
	}
}

// envVar is `env "NAME"`: the task's variable, or a node attribute.
func (r *renderCtx) envVar(k string) string {
	if v, ok := r.env[k]; ok {
		return v
	}
	if r.lookup != nil {
		v, _ := r.lookup(k)
		return v
	}
	return ""
}

// parseService splits consul-template's "[tag.]name[@dc]".
func parseService(q string) (tag, name string) {
	if i := strings.IndexByte(q, '@'); i >= 0 {
		q = q[:i]
	}
	if i := strings.LastIndexByte(q, '.'); i >= 0 {
		return q[:i], q[i+1:]
	}
	return "", q
}

// service is consul-template's `service "[tag.]name" ["any"|"passing,warning"...]`:
// the instances whose status is in the filter (passing by default).
func (r *renderCtx) service(query string, filters ...string) ([]*HealthService, error) {
	if r.cat == nil {
		return nil, fmt.Errorf("service: %w", ErrNoCatalog)
	}
	tag, name := parseService(query)
	if name == "" {
		return nil, fmt.Errorf("service: invalid service %q", query)
	}
	r.readService(name)
	want, err := statusFilter(filters)
	if err != nil {
		return nil, err
	}
	out := []*HealthService{}
	for _, inst := range r.cat.Service(name) {
		status := instanceStatus(inst)
		if (tag != "" && !slices.Contains(inst.Tags, tag)) || (want != nil && !want[status]) {
			continue
		}
		out = append(out, r.healthService(inst, status))
	}
	if len(out) == 0 && r.strict {
		r.missing = append(r.missing, fmt.Sprintf("health.service(%s|%s)", query, filterName(filters)))
	}
	return out, nil
}

func statusFilter(filters []string) (map[string]bool, error) {
	if len(filters) == 0 {
		return map[string]bool{"passing": true}, nil
	}
	want := map[string]bool{}
	for _, f := range filters {
		for _, s := range strings.Split(f, ",") {
			switch s = strings.TrimSpace(s); s {
			case "any":
				return nil, nil
			case "passing", "warning", "critical", "maintenance":
				want[s] = true
			default:
				return nil, fmt.Errorf("service: invalid health status %q; use any, passing, warning or critical", s)
			}
		}
	}
	return want, nil
}

func filterName(filters []string) string {
	if len(filters) == 0 {
		return "passing"
	}
	return strings.Join(filters, ",")
}

// instanceStatus is Consul's aggregate status of an instance's checks.
func instanceStatus(inst catalog.ServiceInstance) string {
	if !inst.Healthy {
		return "critical"
	}
	for _, c := range inst.Checks {
		if c.Status == "warning" {
			return "warning"
		}
	}
	return "passing"
}

func (r *renderCtx) healthService(inst catalog.ServiceInstance, status string) *HealthService {
	node := inst.NodeName
	if node == "" {
		node = r.nodeName
	}
	addr := inst.Address
	if addr == "" {
		addr = inst.NodeAddress
	}
	meta := inst.Meta
	if meta == nil {
		meta = map[string]string{}
	}
	return &HealthService{Node: node, NodeID: inst.NodeID, NodeAddress: inst.NodeAddress,
		NodeDatacenter: inst.Datacenter, Address: addr, ID: inst.ID, Name: inst.Name, Kind: inst.Kind,
		Tags: ServiceTags(append([]string{}, inst.Tags...)), ServiceMeta: meta, Port: inst.Port, Status: status}
}

// services is consul-template's `services`: every service name with its
// tags, sorted by name.
func (r *renderCtx) services() ([]*CatalogSnippet, error) {
	if r.cat == nil {
		return nil, fmt.Errorf("services: %w", ErrNoCatalog)
	}
	r.readAll = true
	all := r.cat.Services()
	out := make([]*CatalogSnippet, 0, len(all))
	for name, tags := range all {
		out = append(out, &CatalogSnippet{Name: name, Tags: ServiceTags(tags)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// nomadService is `nomadService "[tag.]name"`: the service's registrations
// (sidecar proxies excluded), whatever their health, as Nomad lists them.
func (r *renderCtx) nomadService(args ...string) ([]*NomadService, error) {
	if len(args) != 1 {
		return nil, errors.New(`nomadService: only the one-argument form nomadService "[tag.]name" is supported by meshlet`)
	}
	if r.cat == nil {
		return nil, fmt.Errorf("nomadService: %w", ErrNoCatalog)
	}
	tag, name := parseService(args[0])
	r.readService(name)
	out := []*NomadService{}
	for _, inst := range r.cat.Service(name) {
		if inst.Kind != catalog.KindTypical || (tag != "" && !slices.Contains(inst.Tags, tag)) {
			continue
		}
		addr := inst.Address
		if addr == "" {
			addr = inst.NodeAddress
		}
		out = append(out, &NomadService{ID: inst.ID, ServiceName: inst.Name, Namespace: "default",
			NodeID: inst.NodeID, Datacenter: inst.Datacenter, AllocID: inst.AllocID,
			Tags: ServiceTags(append([]string{}, inst.Tags...)), Address: addr, Port: inst.Port})
	}
	if len(out) == 0 && r.strict {
		r.missing = append(r.missing, fmt.Sprintf("nomad.service(%s)", args[0]))
	}
	return out, nil
}

// file is `file "path"`: a file of the task directory (the sandbox Nomad
// applies), read without following symbolic links. A missing file is an
// error, as consul-template's file dependency reports it (Nomad fails the
// task's first render on it; a later re-render keeps the last file).
func (r *renderCtx) file(p string) (string, error) {
	r.usesFile = true
	b, err := readInDir(r.taskDir, p)
	if err != nil {
		return "", fmt.Errorf("file: %w", err)
	}
	return string(b), nil
}

func toJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("toJSON: %w", err)
	}
	return string(b), nil
}

func toJSONPretty(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("toJSONPretty: %w", err)
	}
	return string(b), nil
}

func parseJSON(s string) (any, error) {
	if s == "" {
		return map[string]any{}, nil
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("parseJSON: %w", err)
	}
	return v, nil
}

// contains is consul-template's `contains v list`: membership in a list of
// strings, or a substring of a string.
func contains(v string, l any) (bool, error) {
	switch l := l.(type) {
	case string:
		return strings.Contains(l, v), nil
	case []string:
		return slices.Contains(l, v), nil
	case ServiceTags:
		return slices.Contains(l, v), nil
	case []any:
		return slices.Contains(l, any(v)), nil
	}
	return false, fmt.Errorf("contains: cannot search a %T", l)
}
