package configentry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	consul "github.com/hashicorp/consul/api"
	hcl "github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	hclparser "github.com/hashicorp/hcl/hcl/parser"
)

// parse reads one entry from a file: JSON when the trimmed source starts
// with "{", else HCL1 (Consul's `config write` syntax). Errors are one
// line and start with name (and the line where the parser gives one).
func parse(name string, src []byte) (Entry, error) {
	var raw map[string]any
	var file *ast.File
	if bytes.HasPrefix(bytes.TrimSpace(src), []byte("{")) {
		if err := json.Unmarshal(src, &raw); err != nil {
			return nil, invalidf("%s", jsonError(name, src, err))
		}
	} else {
		var err error
		file, err = hclparser.Parse(src)
		if err != nil {
			return nil, invalidf("%s", hclError(name, err))
		}
		if err := hcl.DecodeObject(&raw, file); err != nil {
			return nil, invalidf("%s: %s", name, oneLine(err.Error()))
		}
	}
	if len(raw) == 0 {
		return nil, invalidf("%s: empty config entry", name)
	}
	e, err := decode(raw)
	if err != nil {
		var ke *keyError
		if errors.As(err, &ke) {
			if line := keyLine(src, file, ke.key); line > 0 {
				name = fmt.Sprintf("%s:%d", name, line)
			}
		}
		return nil, prefixError(name, err)
	}
	return e, nil
}

// keyLine is the line of key in the source when it occurs exactly once
// (else 0: a guess could point at the wrong line).
func keyLine(src []byte, file *ast.File, key string) int {
	var lines []int
	if file == nil {
		quoted := []byte(strconv.Quote(key))
		for off := 0; ; {
			i := bytes.Index(src[off:], quoted)
			if i < 0 {
				break
			}
			lines = append(lines, 1+bytes.Count(src[:off+i], []byte("\n")))
			off += i + len(quoted)
		}
	} else {
		ast.Walk(file, func(n ast.Node) (ast.Node, bool) {
			if item, ok := n.(*ast.ObjectItem); ok {
				for _, k := range item.Keys {
					if strings.Trim(k.Token.Text, `"`) == key {
						lines = append(lines, k.Pos().Line)
					}
				}
			}
			return n, true
		})
	}
	if len(lines) != 1 {
		return 0
	}
	return lines[0]
}

// decode turns a JSON- or HCL-decoded map into a consul/api entry. Keys may
// be PascalCase or snake_case; unknown keys are errors naming the key.
func decode(raw map[string]any) (Entry, error) {
	var kindVal any
	found := 0
	for k, v := range raw {
		if strings.EqualFold(k, "kind") {
			kindVal = v
			found++
		}
	}
	if found == 0 {
		return nil, invalidf("missing Kind")
	}
	if found > 1 {
		return nil, invalidf("Kind given twice")
	}
	kindVal = firstOfList(kindVal)
	kind, ok := kindVal.(string)
	if !ok {
		return nil, invalidf("Kind: expected a string, got %s", typeName(kindVal))
	}
	kind = strings.ToLower(strings.TrimSpace(kind))
	if !KnownKind(kind) {
		return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownKind, kind, strings.Join(Kinds, ", "))
	}
	e, err := consul.MakeConfigEntry(kind, "")
	if err != nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKind, kind)
	}
	if err := decodeValue("", raw, valueOf(e)); err != nil {
		return nil, err
	}
	setKind(e, kind)
	return e, nil
}

// setKind stores the normalized kind in e.
func setKind(e Entry, kind string) {
	switch v := e.(type) {
	case *consul.ProxyConfigEntry:
		v.Kind = kind
	case *consul.ServiceConfigEntry:
		v.Kind = kind
	case *consul.ServiceRouterConfigEntry:
		v.Kind = kind
	case *consul.ServiceSplitterConfigEntry:
		v.Kind = kind
	case *consul.ServiceResolverConfigEntry:
		v.Kind = kind
	case *consul.IngressGatewayConfigEntry:
		v.Kind = kind
	case *consul.TerminatingGatewayConfigEntry:
		v.Kind = kind
	}
}

func jsonError(name string, src []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	off := int64(-1)
	switch {
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	}
	if off < 0 || off > int64(len(src)) {
		return fmt.Sprintf("%s: %s", name, oneLine(err.Error()))
	}
	line := 1 + bytes.Count(src[:off], []byte("\n"))
	return fmt.Sprintf("%s:%d: %s", name, line, oneLine(err.Error()))
}

func hclError(name string, err error) string {
	var pe *hclparser.PosError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s:%d:%d: %s", name, pe.Pos.Line, pe.Pos.Column, oneLine(pe.Err.Error()))
	}
	return fmt.Sprintf("%s: %s", name, oneLine(err.Error()))
}

// prefixError puts the file name in front of a decode error, keeping
// the sentinel it wraps.
func prefixError(name string, err error) error {
	for _, s := range []error{ErrUnknownKind, ErrInvalid} {
		if errors.Is(err, s) {
			msg := strings.TrimPrefix(err.Error(), s.Error()+": ")
			return fmt.Errorf("%w: %s: %s", s, name, msg)
		}
	}
	return invalidf("%s: %s", name, oneLine(err.Error()))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
