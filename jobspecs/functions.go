package jobspecs

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"math/big"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// moreFunctions are the rest of Nomad's jobspec functions that come from
// go-cty's standard library or are a few lines over Go's (encoding,
// hashing, UUIDs). Like stdFunctions every one is bounded (budget.bound):
// its result is checked and charged, and those that could allocate far
// more than their arguments have a pre-check (moreChecks). The rest of
// Nomad's are in functions_nomad.go and, reading files, functions_fs.go.
var moreFunctions = map[string]function.Function{
	// numeric
	"abs": stdlib.AbsoluteFunc, "ceil": stdlib.CeilFunc, "floor": stdlib.FloorFunc,
	"log": stdlib.LogFunc, "pow": stdlib.PowFunc, "signum": stdlib.SignumFunc,
	"parseint": stdlib.ParseIntFunc,
	// strings
	"chomp": stdlib.ChompFunc, "formatlist": stdlib.FormatListFunc, "indent": stdlib.IndentFunc, "regex": stdlib.RegexFunc, "regexall": stdlib.RegexAllFunc,
	"regex_replace": stdlib.RegexReplaceFunc, "strrev": stdlib.ReverseFunc, "substr": stdlib.SubstrFunc,
	"title": stdlib.TitleFunc, "trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc,
	"trimsuffix": stdlib.TrimSuffixFunc, "strlen": stdlib.StrlenFunc,
	// collections
	"chunklist": stdlib.ChunklistFunc, "coalescelist": stdlib.CoalesceListFunc, "compact": stdlib.CompactFunc,
	"contains": stdlib.ContainsFunc, "distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc,
	"flatten": stdlib.FlattenFunc, "index": indexOfFunc, "keys": stdlib.KeysFunc,
	"length": stdlib.LengthFunc, "lookup": stdlib.LookupFunc, "range": stdlib.RangeFunc,
	"reverse": stdlib.ReverseListFunc, "setintersection": stdlib.SetIntersectionFunc, "setproduct": stdlib.SetProductFunc,
	"setunion": stdlib.SetUnionFunc, "setsubtract": stdlib.SetSubtractFunc, "slice": stdlib.SliceFunc,
	"sort": stdlib.SortFunc, "values": stdlib.ValuesFunc, "zipmap": stdlib.ZipmapFunc,
	// encoding, date and time, type conversion
	"csvdecode": stdlib.CSVDecodeFunc, "jsondecode": stdlib.JSONDecodeFunc,
	"formatdate": stdlib.FormatDateFunc, "timeadd": stdlib.TimeAddFunc,
	"tobool": stdlib.MakeToFunc(cty.Bool), "tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)),
	"toset": stdlib.MakeToFunc(cty.Set(cty.DynamicPseudoType)), "tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
	"base64encode": stringFunc(func(s string) (string, error) { return base64.StdEncoding.EncodeToString([]byte(s)), nil }),
	"base64decode": stringFunc(base64Decode),
	"urlencode":    stringFunc(func(s string) (string, error) { return url.QueryEscape(s), nil }),
	"md5":          hashFunc(md5.New), "sha1": hashFunc(sha1.New), "sha256": hashFunc(sha256.New), "sha512": hashFunc(sha512.New),
	"uuidv4": uuidV4Func, "uuidv5": uuidV5Func,
}

// moreChecks are the pre-checks of moreFunctions.
var moreChecks = map[string]func(b *budget, args []cty.Value) error{
	"range":         checkRange,
	"regex_replace": checkRegexReplace,
	"flatten":       checkCollections("flatten"),
	"formatlist":    checkFormatList,
	"indent":        checkIndent,
	"setproduct":    checkSetProduct,
}

// checkFormatList: formatlist(format, args...) makes one string per
// element of its longest list, each at most the format plus every
// argument's text.
func checkFormatList(b *budget, args []cty.Value) error {
	n, each := int64(1), int64(len(args[0].AsString()))
	for _, a := range args[1:] {
		if a.CanIterateElements() && !a.Type().IsObjectType() && !a.Type().IsMapType() {
			n = max(n, int64(a.LengthInt()))
		}
		each += jsonSize(a, int64(b.lim.MaxStringBytes)+1)
	}
	if n > int64(b.lim.MaxCollectionLen) {
		return limitErr("formatlist would produce %d elements; the limit is %d", n, b.lim.MaxCollectionLen)
	}
	return b.checkString("formatlist", n*each)
}

// checkIndent: indent(spaces, str) adds spaces to every line but the
// first.
func checkIndent(b *budget, args []cty.Value) error {
	if args[0].Type() != cty.Number {
		return nil
	}
	spaces, _ := args[0].AsBigFloat().Int64()
	s := args[1].AsString()
	return b.checkString("indent", int64(len(s))+max(spaces, 0)*int64(strings.Count(s, "\n")))
}

// checkSetProduct: the product has as many elements as its sets' sizes
// multiplied.
func checkSetProduct(b *budget, args []cty.Value) error {
	n := int64(1)
	for _, a := range args {
		if !a.CanIterateElements() {
			return nil
		}
		n *= int64(a.LengthInt())
		if n > int64(b.lim.MaxCollectionLen) {
			return limitErr("setproduct would produce more than %d elements; the limit is %d", b.lim.MaxCollectionLen, b.lim.MaxCollectionLen)
		}
	}
	return nil
}

// checkRange: range(limit), range(start, limit) or range(start, limit,
// step) makes (limit-start)/step elements.
func checkRange(b *budget, args []cty.Value) error {
	start, limit, step := big.NewFloat(0), big.NewFloat(0), big.NewFloat(1)
	nums := make([]*big.Float, len(args))
	for i, a := range args {
		if a.Type() != cty.Number {
			return nil // the function reports the type error
		}
		nums[i] = a.AsBigFloat()
	}
	switch len(nums) {
	case 1:
		limit = nums[0]
	case 2:
		start, limit = nums[0], nums[1]
	case 3:
		start, limit, step = nums[0], nums[1], nums[2]
	}
	if step.Sign() == 0 {
		return nil // the function refuses a zero step
	}
	n, _ := new(big.Float).Quo(new(big.Float).Sub(limit, start), step).Float64()
	if n > float64(b.lim.MaxCollectionLen) {
		return limitErr("range would produce %.0f elements; the limit is %d", n, b.lim.MaxCollectionLen)
	}
	return nil
}

// checkRegexReplace: each match (at most one per position, plus one) may
// become the whole replacement.
func checkRegexReplace(b *budget, args []cty.Value) error {
	s, repl := args[0].AsString(), args[2].AsString()
	return b.checkString("regex_replace", int64(len(s))+int64(len(s)+1)*int64(len(repl)))
}

// stringFunc is a function of one string to a string.
func stringFunc(fn func(string) (string, error)) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "str", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			out, err := fn(args[0].AsString())
			if err != nil {
				return cty.UnknownVal(cty.String), err
			}
			return cty.StringVal(out), nil
		},
	})
}

func base64Decode(s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("failed to decode base64 data: %w", err)
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("the decoded base64 data is not valid UTF-8")
	}
	return string(b), nil
}

// hashFunc is the hex digest of a string's bytes.
func hashFunc(h func() hash.Hash) function.Function {
	return stringFunc(func(s string) (string, error) {
		d := h()
		d.Write([]byte(s))
		return hex.EncodeToString(d.Sum(nil)), nil
	})
}

var uuidV4Func = function.New(&function.Spec{
	Type: function.StaticReturnType(cty.String),
	Impl: func([]cty.Value, cty.Type) (cty.Value, error) { return cty.StringVal(uuid.NewString()), nil },
})

// uuidV5Func is uuidv5(namespace, name): namespace is "dns", "url",
// "oid", "x500" or a UUID, as in Nomad.
var uuidV5Func = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "namespace", Type: cty.String}, {Name: "name", Type: cty.String}},
	Type:   function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		var ns uuid.UUID
		switch v := args[0].AsString(); v {
		case "dns":
			ns = uuid.NameSpaceDNS
		case "url":
			ns = uuid.NameSpaceURL
		case "oid":
			ns = uuid.NameSpaceOID
		case "x500":
			ns = uuid.NameSpaceX500
		default:
			var err error
			if ns, err = uuid.Parse(v); err != nil {
				return cty.UnknownVal(cty.String), fmt.Errorf("uuidv5: namespace %q is neither dns, url, oid, x500 nor a UUID", v)
			}
		}
		return cty.StringVal(uuid.NewSHA1(ns, []byte(args[1].AsString())).String()), nil
	},
})

// indexOfFunc is index(list, value): the position of the first element
// equal to value (Terraform's and Nomad's index, not cty's indexing
// operator).
var indexOfFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}, {Name: "value", Type: cty.DynamicPseudoType}},
	Type:   function.StaticReturnType(cty.Number),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		list, v := args[0], args[1]
		if !list.Type().IsListType() && !list.Type().IsTupleType() {
			return cty.UnknownVal(cty.Number), fmt.Errorf("index: the first argument must be a list or tuple")
		}
		i := 0
		for it := list.ElementIterator(); it.Next(); i++ {
			_, e := it.Element()
			if eq := e.Equals(v); eq.IsKnown() && eq.True() {
				return cty.NumberIntVal(int64(i)), nil
			}
		}
		return cty.UnknownVal(cty.Number), fmt.Errorf("index: the value is not in the list")
	},
})
