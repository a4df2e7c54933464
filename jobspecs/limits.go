package jobspecs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// ErrLimitExceeded is wrapped by every error about a jobspec that is too
// large or too expensive to evaluate.
var ErrLimitExceeded = errors.New("jobspec limit exceeded")

// Limits bound what parsing one jobspec may cost, so that a small request
// cannot make the agent allocate without bound (`format("%0999999999d", 0)`,
// `join` of a huge list, nested for expressions...). A zero field takes its
// default.
type Limits struct {
	// MaxSourceBytes bounds the jobspec text (default 4 MiB).
	MaxSourceBytes int
	// MaxStringBytes bounds any string an expression produces (default 1 MiB).
	MaxStringBytes int
	// MaxCollectionLen bounds the elements of any list, tuple, map or
	// object an expression produces, and the iterations of a for
	// expression (default 100,000).
	MaxCollectionLen int
	// MaxEvalCost bounds the total work of one parse: the bytes of every
	// string produced plus 256 per collection element or iteration,
	// summed over all expressions (default 32 MiB).
	MaxEvalCost int64
	// MaxNesting bounds the nesting of brackets, braces, parentheses,
	// interpolations and template directives in the source, and of
	// collections in values (default 128). The HCL parser recurses per
	// level: a megabyte of "(" overflows the stack.
	MaxNesting int
	// MaxOperators bounds the operators (+ - * / % && || ! == ... and ?)
	// in the source (default 10,000): chains of them nest as deeply as
	// brackets do.
	MaxOperators int
	// MaxTokens bounds the tokens in the source (default 100,000): HCL's
	// lexer allocates about 600 bytes per token.
	MaxTokens int
}

// DefaultLimits are the limits used when ParseOptions sets none.
var DefaultLimits = Limits{
	MaxSourceBytes:   4 << 20,
	MaxStringBytes:   1 << 20,
	MaxCollectionLen: 100_000,
	MaxEvalCost:      32 << 20,
	MaxNesting:       128,
	MaxOperators:     10_000,
	MaxTokens:        100_000,
}

// limitSummary is the summary of every diagnostic about an evaluation limit.
const limitSummary = "Evaluation limit exceeded"

// elemCost is what one collection element or loop iteration costs.
const elemCost = 256

// maxNumberExp bounds a number's binary exponent (about 1e±1233): a
// number is cheap to hold whatever its size, but rendering 1e999999999
// as text takes a gigabyte.
const maxNumberExp = 4096

func (l *Limits) withDefaults() Limits {
	d := DefaultLimits
	if l == nil {
		return d
	}
	return Limits{
		MaxSourceBytes:   positiveOr(l.MaxSourceBytes, d.MaxSourceBytes),
		MaxStringBytes:   positiveOr(l.MaxStringBytes, d.MaxStringBytes),
		MaxCollectionLen: positiveOr(l.MaxCollectionLen, d.MaxCollectionLen),
		MaxEvalCost:      positiveOr(l.MaxEvalCost, d.MaxEvalCost),
		MaxNesting:       positiveOr(l.MaxNesting, d.MaxNesting),
		MaxOperators:     positiveOr(l.MaxOperators, d.MaxOperators),
		MaxTokens:        positiveOr(l.MaxTokens, d.MaxTokens),
	}
}

// positiveOr is v when it is set (positive), else def.
func positiveOr[T int | int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// limitDetail renders a limit error as a diagnostic's detail sentence.
func limitDetail(err error) string {
	return strings.TrimPrefix(err.Error(), ErrLimitExceeded.Error()+": ") + "."
}

func limitErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrLimitExceeded}, args...)...)
}

// budget accounts for the cost of one parse. It is used by one goroutine.
type budget struct {
	lim   Limits
	spent int64
	// tables are the parse's function tables, emptied when the budget
	// runs out: HCL looks a function up before evaluating its arguments,
	// so every later call (the charge wrappers included) fails at once
	// instead of walking its arguments (cty walks every argument deeply
	// before a function runs) or running the loops inside them.
	tables    []map[string]function.Function
	exhausted bool
	// fileDir is where the file-system functions (file, fileset...)
	// read ("": not offered).
	fileDir string
}

// spend adds n to the cost, failing once the total is over the limit.
func (b *budget) spend(n int64) error {
	b.spent += n
	if b.spent > b.lim.MaxEvalCost {
		if !b.exhausted {
			b.exhausted = true
			for _, t := range b.tables {
				clear(t)
			}
		}
		return limitErr("Evaluating the jobspec costs more than %d units (bytes of strings produced plus %d per collection element); simplify its expressions",
			b.lim.MaxEvalCost, elemCost)
	}
	return nil
}

// charge checks a produced value against the limits and spends its size.
// Values share structure, so a value's size is measured as if written out:
// a list holding the same big string twice costs it twice.
func (b *budget) charge(v cty.Value) error {
	n, err := b.measure(v, 0, b.lim.MaxEvalCost-b.spent+1)
	if err != nil {
		return err
	}
	// A charge is itself a function call that allocates: it costs one
	// element on top of the value, or a loop building a list of
	// literals would cost almost nothing per element.
	return b.spend(n + elemCost)
}

// measure returns v's size, stopping once it exceeds limit.
func (b *budget) measure(v cty.Value, depth int, limit int64) (int64, error) {
	if depth > b.lim.MaxNesting {
		return 0, limitErr("A value nests more than %d levels deep", b.lim.MaxNesting)
	}
	v, _ = v.Unmark()
	if v.IsNull() || !v.IsKnown() {
		return 1, nil
	}
	t := v.Type()
	switch {
	case t == cty.String:
		if n := len(v.AsString()); n > b.lim.MaxStringBytes {
			return 0, limitErr("A string of %d bytes is longer than the limit of %d bytes", n, b.lim.MaxStringBytes)
		}
		return int64(len(v.AsString())), nil
	case t == cty.Number:
		return 8, checkNumber(v)
	case t.IsListType() || t.IsSetType() || t.IsTupleType() || t.IsMapType() || t.IsObjectType():
		n := v.LengthInt()
		if n > b.lim.MaxCollectionLen {
			return 0, limitErr("A collection of %d elements is longer than the limit of %d", n, b.lim.MaxCollectionLen)
		}
		total := int64(n) * elemCost
		for it := v.ElementIterator(); it.Next() && total <= limit; {
			k, e := it.Element()
			if k.Type() == cty.String {
				total += int64(len(k.AsString()))
			}
			sz, err := b.measure(e, depth+1, limit-total)
			if err != nil {
				return 0, err
			}
			total += sz
		}
		return total, nil
	}
	return 1, nil
}

// maxNumberText bounds the text of a number: converting a string of a
// million digits to a number takes seconds and gigabytes (the parser reads
// every digit), and no number in range needs more than ~1,250 characters.
const maxNumberText = 2048

// checkNumberText rejects a string too long to be converted to a number.
func checkNumberText(v cty.Value) error {
	v, _ = v.Unmark()
	if v.IsKnown() && !v.IsNull() && v.Type() == cty.String && len(v.AsString()) > maxNumberText {
		return limitErr("a number written with %d characters is longer than the limit of %d", len(v.AsString()), maxNumberText)
	}
	return nil
}

// checkConvertible rejects converting v to typ when typ holds numbers
// and v holds a string too long to be one.
func checkConvertible(v cty.Value, typ cty.Type) error {
	if !hasNumber(typ) {
		return nil
	}
	var err error
	_ = cty.Walk(v, func(_ cty.Path, e cty.Value) (bool, error) {
		if err == nil {
			err = checkNumberText(e)
		}
		return err == nil, nil
	})
	return err
}

// hasNumber reports whether typ is or contains cty.Number.
func hasNumber(typ cty.Type) bool {
	switch {
	case typ == cty.Number:
		return true
	case typ.IsCollectionType():
		return hasNumber(typ.ElementType())
	case typ.IsObjectType():
		for _, at := range typ.AttributeTypes() {
			if hasNumber(at) {
				return true
			}
		}
	case typ.IsTupleType():
		for _, et := range typ.TupleElementTypes() {
			if hasNumber(et) {
				return true
			}
		}
	}
	return false
}

// checkNumber rejects numbers too large or too small to render as text.
func checkNumber(v cty.Value) error {
	v, _ = v.Unmark()
	if v.IsNull() || !v.IsKnown() || v.Type() != cty.Number {
		return nil
	}
	bf := v.AsBigFloat()
	if bf.Sign() == 0 {
		return nil
	}
	if e := bf.MantExp(nil); bf.IsInf() || e > maxNumberExp || e < -maxNumberExp {
		return limitErr("The number %s is out of range (about ±1e1233)", bf.Text('g', 5))
	}
	return nil
}
