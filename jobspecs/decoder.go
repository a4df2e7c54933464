package jobspecs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// decoder holds the state of one Parse call.
type decoder struct {
	src   []byte
	ctx   *hcl.EvalContext
	diags Diagnostics
	// ranges maps path keys to the source range of the block or value.
	ranges map[string]hcl.Range
	// failed holds the keys of values that already have a decode error, so
	// validation does not report the same problem twice.
	failed map[string]bool
	// budget bounds the cost of evaluating expressions.
	budget *budget
}

func newDecoder(src []byte, lim Limits) *decoder {
	return &decoder{src: src, ranges: map[string]hcl.Range{}, failed: map[string]bool{}, budget: &budget{lim: lim}}
}

func (d *decoder) add(sev Severity, rng hcl.Range, summary, detail string) {
	d.diags = append(d.diags, Diagnostic{
		Severity: sev, Summary: summary, Detail: detail,
		Filename: rng.Filename, Line: rng.Start.Line, Column: rng.Start.Column,
	})
}

// errAt reports an error about the value at key and marks it failed.
func (d *decoder) errAt(key string, rng hcl.Range, summary, detail string) {
	d.failed[key] = true
	d.add(SeverityError, rng, summary, detail)
}

// addHCL appends HCL diagnostics; any error marks key failed.
func (d *decoder) addHCL(key string, hds hcl.Diagnostics) {
	if hds.HasErrors() {
		d.failed[key] = true
	}
	d.diags = append(d.diags, fromHCL(hds)...)
}

func (d *decoder) rec(p path, rng hcl.Range) { d.ranges[p.key] = rng }

// spec lists what a block body may contain.
type spec struct {
	attrs  []string // arguments
	blocks []string // nested blocks
	// maps are accepted both as `name { k = v }` and `name = { k = v }`.
	maps []string
	// unsupported are known to Nomad but not run by meshlet: parsed, then
	// reported as a warning.
	unsupported []string
	// free: any block type (a free-form body, such as a task's config).
	free bool
}

// content is a body split by name according to a spec.
type content struct {
	attrs  map[string]*hclsyntax.Attribute
	blocks map[string][]*hclsyntax.Block
}

func (c content) has(name string) bool {
	return c.attrs[name] != nil || len(c.blocks[name]) > 0
}

// content checks body against s, reporting unknown and unsupported names.
func (d *decoder) content(body *hclsyntax.Body, s spec) content {
	body = d.expandDynamic(body, s)
	c := content{attrs: map[string]*hclsyntax.Attribute{}, blocks: map[string][]*hclsyntax.Block{}}
	for _, a := range sortedAttrs(body) {
		switch {
		case slices.Contains(s.attrs, a.Name) || slices.Contains(s.maps, a.Name):
			c.attrs[a.Name] = a
		case slices.Contains(s.unsupported, a.Name):
			d.unsupportedAttr(a)
		case slices.Contains(s.blocks, a.Name):
			d.add(SeverityError, a.NameRange, "Unsupported argument", fmt.Sprintf(
				"An argument named %q is not expected here. Did you mean to define a block of type %q?", a.Name, a.Name))
		default:
			d.add(SeverityError, a.NameRange, "Unsupported argument", fmt.Sprintf(
				"An argument named %q is not expected here.%s", a.Name, suggest(a.Name, s.attrs, s.maps, s.unsupported)))
		}
	}
	for _, b := range body.Blocks {
		switch {
		case slices.Contains(s.blocks, b.Type) || slices.Contains(s.maps, b.Type):
			if c.attrs[b.Type] != nil {
				d.add(SeverityError, b.TypeRange, "Duplicate "+b.Type, fmt.Sprintf(
					"%s is already defined as an argument at line %d; use either the block or the argument.",
					b.Type, c.attrs[b.Type].SrcRange.Start.Line))
				continue
			}
			c.blocks[b.Type] = append(c.blocks[b.Type], b)
		case slices.Contains(s.unsupported, b.Type):
			d.unsupportedBlock(b)
		case slices.Contains(s.attrs, b.Type):
			d.add(SeverityError, b.TypeRange, "Unsupported block type", fmt.Sprintf(
				"Blocks of type %q are not expected here. Did you mean to define argument %q? If so, use the equals sign to assign it a value.",
				b.Type, b.Type))
		default:
			d.add(SeverityError, b.TypeRange, "Unsupported block type", fmt.Sprintf(
				"Blocks of type %q are not expected here.%s", b.Type, suggest(b.Type, s.blocks, s.maps, s.unsupported)))
		}
	}
	return c
}

func sortedAttrs(body *hclsyntax.Body) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })
	return out
}

func unsupportedMsg(name string) string {
	return name + " is not supported by meshlet yet; ignored"
}

// unsupportedAttr evaluates an ignored argument (so its errors still show)
// and warns about it.
func (d *decoder) unsupportedAttr(a *hclsyntax.Attribute) {
	if _, hds := d.eval(a.Expr); hds.HasErrors() {
		d.addHCL("", hds)
		return
	}
	d.add(SeverityWarning, a.NameRange, unsupportedMsg(a.Name), "")
}

// unsupportedBlock parses an ignored block free-form and warns about it.
func (d *decoder) unsupportedBlock(b *hclsyntax.Block) {
	d.freeformBody(b.Body)
	if sch := unrunSchemas[b.Type]; sch != nil {
		d.checkUnrun(b.Body, sch)
	}
	if why, refused := refusedBlocks[b.Type]; refused {
		d.add(SeverityError, b.TypeRange, b.Type+" is not supported by meshlet", "Refused: "+why+".")
		return
	}
	d.add(SeverityWarning, b.TypeRange, unsupportedMsg(b.Type), "")
}

// one returns the only block of a type, reporting any duplicate.
func (d *decoder) one(c content, name string) *hclsyntax.Block {
	bs := c.blocks[name]
	if len(bs) == 0 {
		return nil
	}
	for _, b := range bs[1:] {
		d.add(SeverityError, b.TypeRange, "Duplicate "+name+" block", fmt.Sprintf(
			"Only one %s block is allowed here; another was defined at line %d.", name, bs[0].TypeRange.Start.Line))
	}
	return bs[0]
}

// labels checks a block's label count; names describe the labels wanted.
func (d *decoder) labels(b *hclsyntax.Block, names ...string) bool {
	switch {
	case len(b.Labels) < len(names):
		d.add(SeverityError, b.OpenBraceRange, "Missing "+names[len(b.Labels)]+" for "+b.Type, fmt.Sprintf(
			"All %s blocks must have %d label(s): %s.", b.Type, len(names), strings.Join(names, ", ")))
		return false
	case len(b.Labels) > len(names):
		detail := fmt.Sprintf("%s blocks take no labels.", b.Type)
		if len(names) > 0 {
			detail = fmt.Sprintf("%s blocks take only %d label(s): %s.", b.Type, len(names), strings.Join(names, ", "))
		}
		d.add(SeverityError, b.LabelRanges[len(names)], "Extraneous label for "+b.Type, detail)
		return false
	}
	return true
}

// suggest returns " Did you mean "x"?" for a near miss, or "".
func suggest(given string, lists ...[]string) string {
	for _, l := range lists {
		for _, s := range l {
			if levenshtein(given, s) < 3 {
				return fmt.Sprintf(" Did you mean %q?", s)
			}
		}
	}
	return ""
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
