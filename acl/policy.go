package acl

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// PolicyRules is one parsed policy, as written: dispositions are not
// expanded into capabilities here (Compile does that). Coarse rules are
// "" when the policy does not set them.
type PolicyRules struct {
	Namespaces  []*NamespaceRule
	HostVolumes []*HostVolumeRule
	Node        string
	Agent       string
	Operator    string
	Quota       string
	Plugin      string
	// Mesh is Consul's top-level mesh rule; when no policy sets it the
	// operator rule decides (Consul's MeshRead/MeshWrite fallback).
	Mesh            string
	Services        []*ServiceRule
	ServicePrefixes []*ServiceRule
}

// NamespaceRule is a namespace block: Name is a namespace or a glob
// with '*'; Policy is deny, read, write, scale or "".
type NamespaceRule struct {
	Name         string
	Policy       string
	Capabilities []string
}

// HostVolumeRule is a host_volume block: Name is a volume or a glob.
type HostVolumeRule struct {
	Name         string
	Policy       string
	Capabilities []string
}

// ServiceRule is a service or service_prefix block (Consul). Intentions
// is "" when not written: Compile then applies Consul's implied value.
type ServiceRule struct {
	Name       string
	Policy     string
	Intentions string
}

// ParseError is a refused policy text: a position and a one-line
// message. It wraps ErrInvalid.
type ParseError struct {
	Line, Column int
	Msg          string
}

// Error formats the error as "policy:LINE:COL: message".
func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", policyFilename, e.Line, e.Column, e.Msg)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *ParseError) Unwrap() error { return ErrInvalid }

// policyFilename names the policy text in positions.
const policyFilename = "policy"

// validNamespace is Nomad's rule for namespace labels (globs included).
var validNamespace = lazyre.New(`^[a-zA-Z0-9*-]{1,128}$`)

var (
	rootSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "mesh"}},
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "namespace", LabelNames: []string{"name"}},
			{Type: "host_volume", LabelNames: []string{"name"}},
			{Type: "node"}, {Type: "agent"}, {Type: "operator"}, {Type: "quota"}, {Type: "plugin"},
			{Type: "service", LabelNames: []string{"name"}},
			{Type: "service_prefix", LabelNames: []string{"name"}},
		},
	}
	capabilitySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "policy"}, {Name: "capabilities"},
	}}
	coarseSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "policy", Required: true},
	}}
	serviceSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
		{Name: "policy", Required: true}, {Name: "intentions"},
	}}
)

// Parse parses a policy's rules: HCL native syntax, or HCL's JSON form
// when the text starts with '{'. Nomad's rules (namespace, host_volume,
// node, agent, operator, quota, plugin) and Consul's mesh-side rules
// (service, service_prefix, mesh) are accepted; anything else, a bad
// disposition, an unknown capability or an empty policy is a
// *ParseError wrapping ErrInvalid.
func Parse(rules string) (*PolicyRules, error) {
	src := []byte(rules)
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.HasPrefix(strings.TrimSpace(rules), "{") {
		file, diags = hcljson.Parse(src, policyFilename)
	} else {
		file, diags = hclsyntax.ParseConfig(src, policyFilename, hcl.InitialPos)
		if !diags.HasErrors() {
			defaultNamespaceLabels(file.Body)
		}
	}
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	content, diags := file.Body.Content(rootSchema)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	if len(content.Blocks) == 0 && len(content.Attributes) == 0 {
		return nil, &ParseError{Line: 1, Column: 1, Msg: "empty policy: want at least one rule"}
	}
	p := &PolicyRules{}
	if attr, ok := content.Attributes["mesh"]; ok {
		v, err := decodeDisposition(attr, "mesh policy", PolicyDeny, PolicyRead, PolicyWrite)
		if err != nil {
			return nil, err
		}
		p.Mesh = v
	}
	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		if err := p.addBlock(b, seen); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// defaultNamespaceLabels gives an unlabeled namespace block the label
// "default": Nomad's "If no namespace label is specified, the rule will
// apply to the default namespace". (JSON has no unlabeled form.)
func defaultNamespaceLabels(body hcl.Body) {
	sb, ok := body.(*hclsyntax.Body)
	if !ok {
		return
	}
	for _, b := range sb.Blocks {
		if b.Type == "namespace" && len(b.Labels) == 0 {
			b.Labels = []string{"default"}
			b.LabelRanges = []hcl.Range{b.TypeRange}
		}
	}
}

// addBlock validates one top-level block and records it in p. seen
// holds the single-instance blocks met so far.
func (p *PolicyRules) addBlock(b *hcl.Block, seen map[string]hcl.Range) error {
	switch b.Type {
	case "namespace", "host_volume":
		return p.addCapabilityBlock(b)
	case "service", "service_prefix":
		return p.addServiceBlock(b)
	}
	// node, agent, operator, quota, plugin: one per policy (Nomad).
	if first, dup := seen[b.Type]; dup {
		return errorAt(b.TypeRange, "duplicate %s block: a policy has at most one (first at %d:%d)",
			b.Type, first.Start.Line, first.Start.Column)
	}
	seen[b.Type] = b.TypeRange
	content, diags := b.Body.Content(coarseSchema)
	if diags.HasErrors() {
		return diagError(diags)
	}
	allowed := []string{PolicyDeny, PolicyRead, PolicyWrite}
	if b.Type == "plugin" {
		allowed = []string{PolicyDeny, PolicyRead, PolicyList, PolicyWrite}
	}
	v, err := decodeDisposition(content.Attributes["policy"], b.Type+" policy", allowed...)
	if err != nil {
		return err
	}
	switch b.Type {
	case "node":
		p.Node = v
	case "agent":
		p.Agent = v
	case "operator":
		p.Operator = v
	case "quota":
		p.Quota = v
	case "plugin":
		p.Plugin = v
	}
	return nil
}

// addCapabilityBlock handles namespace and host_volume blocks: a label,
// an optional policy and an optional capabilities list.
func (p *PolicyRules) addCapabilityBlock(b *hcl.Block) error {
	name := b.Labels[0]
	if b.Type == "namespace" && !validNamespace.MatchString(name) {
		return errorAt(b.LabelRanges[0], "invalid namespace name %q: want 1 to 128 letters, digits, '-' or '*'", name)
	}
	if b.Type == "host_volume" && (name == "" || len(name) > 128) {
		return errorAt(b.LabelRanges[0], "invalid host_volume name %q: want 1 to 128 characters", name)
	}
	content, diags := b.Body.Content(capabilitySchema)
	if diags.HasErrors() {
		return diagError(diags)
	}
	policies := []string{PolicyDeny, PolicyRead, PolicyWrite, PolicyScale}
	capabilities := namespaceCapabilities
	if b.Type == "host_volume" {
		policies = policies[:3]
		capabilities = hostVolumeCapabilities
	}
	var policy string
	if attr, ok := content.Attributes["policy"]; ok {
		v, err := decodeDisposition(attr, b.Type+" policy", policies...)
		if err != nil {
			return err
		}
		policy = v
	}
	var caps []string
	if attr, ok := content.Attributes["capabilities"]; ok {
		v, err := decodeCapabilities(attr, b.Type, capabilities)
		if err != nil {
			return err
		}
		caps = v
	}
	if b.Type == "namespace" {
		p.Namespaces = append(p.Namespaces, &NamespaceRule{Name: name, Policy: policy, Capabilities: caps})
	} else {
		p.HostVolumes = append(p.HostVolumes, &HostVolumeRule{Name: name, Policy: policy, Capabilities: caps})
	}
	return nil
}

// addServiceBlock handles Consul's service and service_prefix blocks.
func (p *PolicyRules) addServiceBlock(b *hcl.Block) error {
	content, diags := b.Body.Content(serviceSchema)
	if diags.HasErrors() {
		return diagError(diags)
	}
	policy, err := decodeDisposition(content.Attributes["policy"], b.Type+" policy",
		PolicyDeny, PolicyRead, PolicyWrite)
	if err != nil {
		return err
	}
	r := &ServiceRule{Name: b.Labels[0], Policy: policy}
	if attr, ok := content.Attributes["intentions"]; ok {
		v, err := decodeDisposition(attr, b.Type+" intentions", PolicyDeny, PolicyRead, PolicyWrite)
		if err != nil {
			return err
		}
		r.Intentions = v
	}
	if b.Type == "service" {
		p.Services = append(p.Services, r)
	} else {
		p.ServicePrefixes = append(p.ServicePrefixes, r)
	}
	return nil
}

// decodeDisposition decodes attr as a string that must be one of
// allowed; what names the attribute in the message.
func decodeDisposition(attr *hcl.Attribute, what string, allowed ...string) (string, error) {
	var v string
	if diags := gohcl.DecodeExpression(attr.Expr, nil, &v); diags.HasErrors() {
		return "", diagError(diags)
	}
	if !validIn(v, allowed...) {
		return "", errorAt(attr.Expr.Range(), "invalid %s %q: want %s", what, v, orList(allowed))
	}
	return v, nil
}

// decodeCapabilities decodes attr as a list of known capabilities,
// naming the position of the first unknown one.
func decodeCapabilities(attr *hcl.Attribute, blockType string, known []string) ([]string, error) {
	exprs, diags := hcl.ExprList(attr.Expr)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	caps := make([]string, 0, len(exprs))
	for _, e := range exprs {
		var c string
		if diags := gohcl.DecodeExpression(e, nil, &c); diags.HasErrors() {
			return nil, diagError(diags)
		}
		if !validIn(c, known...) {
			return nil, errorAt(e.Range(), "unknown %s capability %q", blockType, c)
		}
		caps = append(caps, c)
	}
	return caps, nil
}

// orList renders ["a", "b", "c"] as "a, b or c".
func orList(vs []string) string {
	if len(vs) == 1 {
		return vs[0]
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// errorAt is a ParseError at the start of r.
func errorAt(r hcl.Range, format string, args ...any) *ParseError {
	return &ParseError{Line: r.Start.Line, Column: r.Start.Column, Msg: fmt.Sprintf(format, args...)}
}

// diagError turns the first error of diags into a one-line ParseError.
func diagError(diags hcl.Diagnostics) *ParseError {
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += "; " + d.Detail
		}
		msg = strings.Join(strings.Fields(msg), " ")
		if d.Subject == nil {
			return &ParseError{Line: 1, Column: 1, Msg: msg}
		}
		return errorAt(*d.Subject, "%s", msg)
	}
	return &ParseError{Line: 1, Column: 1, Msg: "invalid policy"}
}
