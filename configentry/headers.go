package configentry

import (
	"maps"
	"reflect"
	"slices"

	consul "github.com/hashicorp/consul/api"
)

// nestSplitHeaders returns the header changes of a split of an outer
// splitter whose target is reached through an inner splitter's split, as
// Consul flattens nested splitters: a request passes the outer split, then
// the inner one, so the inner's request changes win where both name a
// header; a response passes them the other way, so the outer's response
// changes win.
func nestSplitHeaders(outer consul.ServiceSplit, inner Split) (req, resp *consul.HTTPHeaderModifiers) {
	return mergeHeaders(outer.RequestHeaders, inner.RequestHeaders), mergeHeaders(inner.ResponseHeaders, outer.ResponseHeaders)
}

// mergeHeaders returns base's header changes with over's applied after
// them: over's Add and Set replace base's for the same header, and the
// removals of both are kept once each. Neither argument is changed; nil
// and nil give nil.
func mergeHeaders(base, over *consul.HTTPHeaderModifiers) *consul.HTTPHeaderModifiers {
	switch {
	case base == nil:
		return over
	case over == nil:
		return base
	}
	out := &consul.HTTPHeaderModifiers{
		Add: mergeHeaderMap(base.Add, over.Add),
		Set: mergeHeaderMap(base.Set, over.Set),
	}
	out.Remove = slices.Clone(base.Remove)
	for _, h := range over.Remove {
		if !slices.Contains(out.Remove, h) {
			out.Remove = append(out.Remove, h)
		}
	}
	return out
}

func mergeHeaderMap(base, over map[string]string) map[string]string {
	if len(base) == 0 && len(over) == 0 {
		return nil
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}

// sameHeaders reports whether two splits change headers alike, so that
// their traffic may share one weighted cluster.
func sameHeaders(a, b Split) bool {
	return reflect.DeepEqual(a.RequestHeaders, b.RequestHeaders) && reflect.DeepEqual(a.ResponseHeaders, b.ResponseHeaders)
}
