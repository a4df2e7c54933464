package jobspecs

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/go-cty-funcs/cidr"
	"github.com/hashicorp/go-cty-funcs/crypto"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	ctyyaml "github.com/zclconf/go-cty-yaml"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
)

// nomadFunctions are the rest of Nomad's jobspec functions that do not
// touch the file system, from the libraries Nomad itself uses
// (go-cty-funcs, go-cty-yaml, HCL's typeexpr). Bounded like moreFunctions
// (pre-checks in nomadChecks).
var nomadFunctions = map[string]function.Function{
	"cidrhost":    cidr.HostFunc,
	"cidrnetmask": cidr.NetmaskFunc,
	"cidrsubnet":  cidr.SubnetFunc,
	"cidrsubnets": cidr.SubnetsFunc,
	"yamldecode":  ctyyaml.YAMLDecodeFunc,
	"yamlencode":  ctyyaml.YAMLEncodeFunc,
	"bcrypt":      crypto.BcryptFunc,
	"rsadecrypt":  crypto.RsaDecryptFunc,
	"convert":     typeexpr.ConvertFunc,
}

var nomadChecks = map[string]func(b *budget, args []cty.Value) error{
	"cidrsubnets": checkCIDRSubnets,
	"yamlencode":  checkYAMLEncode,
	"bcrypt":      checkBcrypt,
	"rsadecrypt":  checkRSADecrypt,
	"convert": func(_ *budget, args []cty.Value) error {
		return checkConvertible(args[0], typeexpr.TypeConstraintFromVal(args[1]))
	},
}

// nomadTypeChecks run before a function computes its result type, where
// that already does the expensive work: go-cty-yaml parses the document
// to find its type.
var nomadTypeChecks = map[string]func(b *budget, args []cty.Value) error{
	"yamldecode": checkYAMLDecode,
}

// checkedType wraps f so that check runs on known arguments before f's
// result type is computed.
func (b *budget) checkedType(f function.Function, check func(*budget, []cty.Value) error) function.Function {
	return function.New(&function.Spec{
		Description: f.Description(),
		Params:      f.Params(),
		VarParam:    f.VarParam(),
		Type: func(args []cty.Value) (cty.Type, error) {
			if allKnown(args) {
				if err := check(b, args); err != nil {
					return cty.DynamicPseudoType, err
				}
			}
			return f.ReturnTypeForValues(args)
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) { return f.Call(args) },
	})
}

const (
	// maxBcryptCost bounds bcrypt's cost: each step doubles its time
	// (10, the default, takes about 50 ms; 31 would take days).
	maxBcryptCost = 14
	// bcryptUnits is what one round of bcrypt costs (cost 10: 1 Mi
	// units, so a parse may hash about 32 times at the default cost).
	bcryptUnits = 1024
	// maxRSAKeyBytes bounds rsadecrypt's PEM key: an 8192-bit key is
	// about 6.3 KiB, and the private operation grows with the cube of the
	// key size.
	maxRSAKeyBytes = 8 << 10
	// rsaUnits is what one rsadecrypt costs.
	rsaUnits = 1 << 20
)

// checkCIDRSubnets: one subnet per newbits argument.
func checkCIDRSubnets(b *budget, args []cty.Value) error {
	if n := len(args) - 1; n > b.lim.MaxCollectionLen {
		return limitErr("cidrsubnets would produce %d subnets; the limit is %d", n, b.lim.MaxCollectionLen)
	}
	return nil
}

// checkBcrypt refuses a cost above maxBcryptCost and spends 2^cost
// rounds from the budget before hashing.
func checkBcrypt(b *budget, args []cty.Value) error {
	cost := int64(bcrypt.DefaultCost)
	if len(args) > 1 && args[1].Type() == cty.Number {
		// bcrypt takes a cost below its minimum as the default.
		if c, _ := args[1].AsBigFloat().Int64(); c >= int64(bcrypt.MinCost) {
			cost = c
		}
	}
	if cost > maxBcryptCost {
		return limitErr("bcrypt cost %d is above the limit of %d", cost, maxBcryptCost)
	}
	return b.spend(int64(1) << cost * bcryptUnits)
}

// checkRSADecrypt bounds the key's size and spends rsaUnits.
func checkRSADecrypt(b *budget, args []cty.Value) error {
	if n := len(args[1].AsString()); n > maxRSAKeyBytes {
		return limitErr("rsadecrypt's private key has %d bytes; the limit is %d", n, maxRSAKeyBytes)
	}
	return b.spend(rsaUnits)
}

// checkYAMLDecode bounds the document before go-cty-yaml reads it, with
// yaml.v3 (which stops at 10,000 levels, in linear time):
//   - nesting: go-cty-yaml's parser (an older libyaml port) takes time
//     quadratic in the depth of nested collections (1 MiB of "[" takes
//     minutes);
//   - values with aliases expanded: an alias repeats its anchor's value, so
//     a kilobyte of nested aliases stands for billions of values, and cty
//     walks the expanded types before any result can be charged.
//
// A document yaml.v3 cannot read is refused with its error.
func checkYAMLDecode(b *budget, args []cty.Value) error {
	dec := yaml.NewDecoder(strings.NewReader(args[0].AsString()))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if strings.Contains(err.Error(), "exceeded max depth") {
				return limitErr("yamldecode: the document nests more than %d levels deep", b.lim.MaxNesting)
			}
			return fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		w := yamlWalk{memo: map[*yaml.Node]yamlExtent{}, busy: map[*yaml.Node]bool{}, limit: int64(b.lim.MaxCollectionLen)}
		switch sz := w.size(&doc); {
		case w.cycle != "":
			return fmt.Errorf("invalid YAML: cannot refer to anchor %q from inside its own definition", w.cycle)
		case sz.depth > b.lim.MaxNesting:
			return limitErr("yamldecode: the document nests more than %d levels deep", b.lim.MaxNesting)
		case sz.nodes > w.limit:
			return limitErr("yamldecode would produce more than %d values (YAML aliases expanded); the limit is %d", w.limit, w.limit)
		}
	}
}

// yamlExtent is a node's count of nodes and depth of nested collections,
// aliases expanded.
type yamlExtent struct {
	nodes int64
	depth int
}

// yamlWalk measures nodes, memoizing each (an anchor is measured once
// however often aliases repeat it) and stopping past limit nodes.
type yamlWalk struct {
	memo  map[*yaml.Node]yamlExtent
	busy  map[*yaml.Node]bool // being measured
	limit int64
	cycle string // an anchor referred to from inside itself
}

func (w *yamlWalk) size(n *yaml.Node) yamlExtent {
	if n == nil {
		return yamlExtent{}
	}
	if sz, ok := w.memo[n]; ok {
		return sz
	}
	if w.busy[n] {
		w.cycle = n.Anchor
		return yamlExtent{nodes: w.limit + 1}
	}
	w.busy[n] = true
	defer delete(w.busy, n)
	sz := yamlExtent{nodes: 1}
	if n.Kind == yaml.AliasNode {
		sz = w.size(n.Alias)
	}
	for _, c := range n.Content {
		if sz.nodes > w.limit {
			break
		}
		csz := w.size(c)
		sz.nodes += csz.nodes
		sz.depth = max(sz.depth, csz.depth)
	}
	if n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode {
		sz.depth++
	}
	w.memo[n] = sz
	return sz
}

// checkYAMLEncode bounds the YAML text of a value before it is encoded.
func checkYAMLEncode(b *budget, args []cty.Value) error {
	return b.checkString("yamlencode", yamlSize(args[0], 0, int64(b.lim.MaxStringBytes)+1))
}

// yamlSize bounds v's YAML encoding at nesting depth, stopping past
// limit. Every element is on its own line, indented two spaces per
// level.
func yamlSize(v cty.Value, depth, limit int64) int64 {
	v, _ = v.Unmark()
	indent := 2*depth + 2
	if v.IsNull() || !v.IsKnown() {
		return 4
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return yamlStringSize(v.AsString(), indent)
	case t == cty.Number:
		return numberTextSize(v)
	case t == cty.Bool:
		return 5
	case v.CanIterateElements():
		total := int64(3)
		for it := v.ElementIterator(); it.Next() && total <= limit; {
			k, e := it.Element()
			total += indent + 3
			if k.Type() == cty.String {
				total += yamlStringSize(k.AsString(), indent)
			}
			total += yamlSize(e, depth+1, limit-total)
		}
		return total
	}
	return 4
}

// yamlStringSize bounds a string's YAML text: quoted, '"' and '\\'
// escaped, control characters as \xXX and other runes at worst as \uXXXX
// or \UXXXXXXXX; each space or newline may start an indented line.
func yamlStringSize(s string, indent int64) int64 {
	n := int64(2)
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			n += 2
		case r < 0x20 || r == 0x7f:
			n += 4
		case r < utf8.RuneSelf:
			n++
		case r > 0xffff:
			n += 10
		default:
			n += 6
		}
		if r == ' ' || r == '\n' {
			n += indent
		}
	}
	return n
}
