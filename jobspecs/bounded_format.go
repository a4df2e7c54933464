package jobspecs

import (
	"strings"

	"github.com/zclconf/go-cty/cty"
)

// checkFormat bounds format(spec, args...) before it runs: cty pads
// strings to any width with strings.Repeat, so "%999999999s" alone asks
// for a gigabyte. Each verb is estimated as the larger of its width and
// its argument's text plus precision; the verb syntax is cty's:
// %[flags][width][.precision][[n]]verb.
func checkFormat(b *budget, args []cty.Value) error {
	spec, vals := args[0].AsString(), args[1:]
	limit := int64(b.lim.MaxStringBytes)
	total := int64(0)
	next := 1 // one-based index of the next argument
	for i := 0; i < len(spec) && total <= limit; {
		if spec[i] != '%' {
			total++
			i++
			continue
		}
		if i+1 < len(spec) && spec[i+1] == '%' {
			total++
			i += 2
			continue
		}
		v, n := scanVerb(spec[i+1:])
		if n == 0 {
			break // malformed: format reports it
		}
		i += 1 + n
		if v.argNum > 0 {
			next = int(v.argNum)
		}
		arg := cty.NilVal
		if next >= 1 && next <= len(vals) {
			arg = vals[next-1]
		}
		next++
		if strings.IndexByte("bdoxXeEfgG", v.mode) >= 0 && arg != cty.NilVal {
			if err := checkNumberText(arg); err != nil {
				return err
			}
		}
		total += max(v.width, verbArgSize(v.mode, arg, limit)+v.prec)
	}
	return b.checkString("format", total)
}

type verbSpec struct {
	width, prec, argNum int64
	mode                byte
}

// scanVerb reads a verb after its '%'; n is the bytes consumed, 0 when
// the verb is malformed. Numbers saturate instead of overflowing.
func scanVerb(s string) (v verbSpec, n int) {
	i := 0
	for i < len(s) && (s[i] == '0' || s[i] == '#' || s[i] == '-' || s[i] == '+' || s[i] == ' ') {
		i++
	}
	v.width, i = scanNum(s, i)
	if i < len(s) && s[i] == '.' {
		v.prec, i = scanNum(s, i+1)
	}
	if i < len(s) && s[i] == '[' {
		v.argNum, i = scanNum(s, i+1)
		if i >= len(s) || s[i] != ']' {
			return v, 0
		}
		i++
	}
	if i >= len(s) || !(s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
		return v, 0
	}
	v.mode = s[i]
	return v, i + 1
}

func scanNum(s string, i int) (int64, int) {
	var n int64
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = min(n*10+int64(s[i]-'0'), 1<<40)
	}
	return n, i
}

// verbArgSize bounds the text a verb makes of its argument.
func verbArgSize(mode byte, arg cty.Value, limit int64) int64 {
	if arg == cty.NilVal {
		return 0
	}
	arg, _ = arg.Unmark()
	if arg.IsNull() || !arg.IsKnown() {
		return 4
	}
	switch {
	case mode == 't':
		return 5
	case mode == 'q':
		if arg.Type() == cty.String {
			return jsonStringSize(arg.AsString())
		}
	case arg.Type() == cty.String:
		return int64(len(arg.AsString()))
	case arg.Type() == cty.Number:
		return numberTextSize(arg)
	}
	return jsonSize(arg, limit)
}
