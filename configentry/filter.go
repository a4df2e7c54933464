package configentry

import (
	"errors"
	"fmt"
	"sync"

	bexpr "github.com/hashicorp/go-bexpr"
	"github.com/hashicorp/go-bexpr/grammar"
	"github.com/mitchellh/pointerstructure"

	"github.com/meshlet/meshlet/catalog"
)

// A resolver subset's Filter is a go-bexpr expression over a view shaped
// like Consul's health service entries (structs.CheckServiceNode), so
// filters written for Consul work unchanged:
//
//	Service.Meta.version == v2
//	"canary" in Service.Tags and Node.Meta.zone != east

// filterView is what a filter sees of one instance.
type filterView struct {
	Node    filterNode
	Service filterService
	Checks  []filterCheck
}

type filterNode struct {
	ID         string
	Node       string
	Address    string
	Datacenter string
	Meta       map[string]string
}

type filterService struct {
	ID      string
	Service string
	Kind    string
	Address string
	Port    int
	Tags    []string
	Meta    map[string]string
}

type filterCheck struct {
	CheckID     string
	Name        string
	Type        string
	Status      string
	Output      string
	ServiceID   string
	ServiceName string
}

func viewOf(inst catalog.ServiceInstance) *filterView {
	v := &filterView{
		Node: filterNode{
			ID: inst.NodeID, Node: inst.NodeName, Address: inst.NodeAddress,
			Datacenter: inst.Datacenter, Meta: map[string]string{},
		},
		Service: filterService{
			ID: inst.ID, Service: inst.Name, Kind: inst.Kind, Address: inst.Address,
			Port: inst.Port, Tags: inst.Tags, Meta: inst.Meta,
		},
	}
	if v.Node.Node == "" {
		v.Node.Node = inst.NodeID
	}
	if v.Service.Meta == nil {
		v.Service.Meta = map[string]string{}
	}
	if v.Service.Tags == nil {
		v.Service.Tags = []string{}
	}
	for _, c := range inst.Checks {
		v.Checks = append(v.Checks, filterCheck{
			CheckID: c.ID, Name: c.Name, Type: c.Type, Status: c.Status, Output: c.Output,
			ServiceID: inst.ID, ServiceName: inst.Name,
		})
	}
	return v
}

// filterCacheMax bounds the evaluator cache; it is cleared when full
// (filters come from config entries, so the working set is small).
const filterCacheMax = 4096

type compiledFilter struct {
	eval *bexpr.Evaluator
	err  error
}

var filterCache struct {
	sync.RWMutex
	m map[string]compiledFilter
}

// compileFilter parses and checks a filter once; later calls share it.
func compileFilter(filter string) (*bexpr.Evaluator, error) {
	filterCache.RLock()
	c, ok := filterCache.m[filter]
	filterCache.RUnlock()
	if ok {
		return c.eval, c.err
	}
	c.eval, c.err = buildFilter(filter)
	filterCache.Lock()
	if filterCache.m == nil || len(filterCache.m) >= filterCacheMax {
		filterCache.m = map[string]compiledFilter{}
	}
	filterCache.m[filter] = c
	filterCache.Unlock()
	return c.eval, c.err
}

func buildFilter(filter string) (*bexpr.Evaluator, error) {
	ast, err := grammar.Parse("", []byte(filter), grammar.MaxExpressions(10000))
	if err != nil {
		return nil, invalidf("filter %q: %s", filter, oneLine(err.Error()))
	}
	if err := checkSelectors(ast.(grammar.Expression), nil); err != nil {
		return nil, invalidf("filter %q: %v", filter, err)
	}
	eval, err := bexpr.CreateEvaluator(filter)
	if err != nil {
		return nil, invalidf("filter %q: %s", filter, oneLine(err.Error()))
	}
	return eval, nil
}

// sampleView has every map and list the view can hold, for selector checks.
var sampleView = &filterView{
	Node:    filterNode{Meta: map[string]string{}},
	Service: filterService{Meta: map[string]string{}, Tags: []string{}},
	Checks:  []filterCheck{},
}

// checkSelectors refuses selectors that name no field of the view (as
// Consul does), so that a typo is an error at write time rather than a
// subset that never matches. Names bound by collection expressions are
// local and skipped.
func checkSelectors(expr grammar.Expression, locals []string) error {
	switch e := expr.(type) {
	case *grammar.UnaryExpression:
		return checkSelectors(e.Operand, locals)
	case *grammar.BinaryExpression:
		if err := checkSelectors(e.Left, locals); err != nil {
			return err
		}
		return checkSelectors(e.Right, locals)
	case *grammar.MatchExpression:
		return checkSelector(e.Selector, locals)
	case *grammar.CollectionExpression:
		if err := checkSelector(e.Selector, locals); err != nil {
			return err
		}
		b := e.NameBinding
		inner := append(append([]string(nil), locals...), b.Default, b.Index, b.Value)
		return checkSelectors(e.Inner, inner)
	}
	return nil
}

func checkSelector(sel grammar.Selector, locals []string) error {
	if len(sel.Path) == 0 {
		return nil
	}
	for _, l := range locals {
		if l != "" && sel.Path[0] == l {
			return nil
		}
	}
	ptr := pointerstructure.Pointer{Parts: sel.Path, Config: pointerstructure.Config{TagName: "bexpr"}}
	if _, err := ptr.Get(sampleView); err != nil {
		if errors.Is(err, pointerstructure.ErrNotFound) && len(sel.Path) > 1 {
			parent := pointerstructure.Pointer{Parts: sel.Path[:len(sel.Path)-1], Config: ptr.Config}
			if pv, perr := parent.Get(sampleView); perr == nil {
				if _, isMap := pv.(map[string]string); isMap {
					return nil // a map key no instance has yet
				}
			}
		}
		return fmt.Errorf("selector %q is not valid (use Service.ID, Service.Service, Service.Tags, Service.Meta.<key>, Service.Port, Service.Address, Node.Node, Node.Meta.<key>...)", sel.String())
	}
	return nil
}

// ValidateFilter reports whether a subset filter parses and names only
// fields of the instance view; errors wrap ErrInvalid.
func ValidateFilter(filter string) error {
	if filter == "" {
		return nil
	}
	_, err := compileFilter(filter)
	return err
}

// MatchFilter reports whether a subset filter selects an instance ("":
// every instance). Compiled filters are cached.
func MatchFilter(filter string, inst catalog.ServiceInstance) (bool, error) {
	if filter == "" {
		return true, nil
	}
	eval, err := compileFilter(filter)
	if err != nil {
		return false, err
	}
	ok, err := eval.Evaluate(viewOf(inst))
	if err != nil {
		return false, invalidf("filter %q: %s", filter, oneLine(err.Error()))
	}
	return ok, nil
}
