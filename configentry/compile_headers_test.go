package configentry

import (
	"fmt"
	"reflect"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

func hdrs(set map[string]string, remove ...string) *consul.HTTPHeaderModifiers {
	return &consul.HTTPHeaderModifiers{Set: set, Remove: remove}
}

// A split of an outer splitter that reaches an inner splitter keeps both
// splitters' header changes, as Consul's flattening does: for requests the
// inner split's win where both set a header (it applies last), for
// responses the outer split's win.
func TestCompileNestedSplitHeaders(t *testing.T) {
	s := NewSet(defaults("web", "http"), defaults("api", "http"), resolver("web", "v1"), resolver("api", "a", "b"),
		splitter("web",
			consul.ServiceSplit{Weight: 50, ServiceSubset: "v1", RequestHeaders: hdrs(map[string]string{"x-web": "v1"})},
			consul.ServiceSplit{Weight: 50, Service: "api",
				RequestHeaders:  &consul.HTTPHeaderModifiers{Add: map[string]string{"x-add": "outer"}, Set: map[string]string{"x-layer": "outer", "x-outer": "web"}, Remove: []string{"x-a", "x-b"}},
				ResponseHeaders: hdrs(map[string]string{"x-layer": "outer"}, "x-secret")}),
		splitter("api",
			consul.ServiceSplit{Weight: 80, ServiceSubset: "a",
				RequestHeaders:  &consul.HTTPHeaderModifiers{Add: map[string]string{"x-add": "inner"}, Set: map[string]string{"x-layer": "inner"}, Remove: []string{"x-b", "x-c"}},
				ResponseHeaders: hdrs(map[string]string{"x-layer": "inner", "x-inner": "api"}, "x-secret", "x-debug")},
			consul.ServiceSplit{Weight: 20, ServiceSubset: "b"}),
	)
	c := mustCompile(t, s, "web")
	want := []Split{
		{Weight: 50, TargetID: "v1.web.default.default.dc1", RequestHeaders: hdrs(map[string]string{"x-web": "v1"})},
		{Weight: 40, TargetID: "a.api.default.default.dc1",
			RequestHeaders: &consul.HTTPHeaderModifiers{Add: map[string]string{"x-add": "inner"},
				Set: map[string]string{"x-layer": "inner", "x-outer": "web"}, Remove: []string{"x-a", "x-b", "x-c"}},
			ResponseHeaders: hdrs(map[string]string{"x-layer": "outer", "x-inner": "api"}, "x-secret", "x-debug")},
		{Weight: 10, TargetID: "b.api.default.default.dc1",
			RequestHeaders: &consul.HTTPHeaderModifiers{Add: map[string]string{"x-add": "outer"},
				Set: map[string]string{"x-layer": "outer", "x-outer": "web"}, Remove: []string{"x-a", "x-b"}},
			ResponseHeaders: hdrs(map[string]string{"x-layer": "outer"}, "x-secret")},
	}
	if got := c.Routes[0].Splits; !reflect.DeepEqual(got, want) {
		t.Errorf("splits:\n got %s\nwant %s", fmtSplits(got), fmtSplits(want))
	}
	// The entries themselves are not changed by compiling.
	inner, _ := s.Get(ServiceSplitter, "api").(*consul.ServiceSplitterConfigEntry)
	if got := inner.Splits[0].RequestHeaders; !reflect.DeepEqual(got.Set, map[string]string{"x-layer": "inner"}) ||
		!reflect.DeepEqual(got.Remove, []string{"x-b", "x-c"}) {
		t.Errorf("api's splitter was changed: %+v", got)
	}
}

// Two splits that reach the same target keep their own header changes and
// weights, as Consul's separate weighted clusters do; splits to the same
// target that change headers alike are still one.
func TestCompileSameTargetSplitHeaders(t *testing.T) {
	s := NewSet(defaults("web", "http"), defaults("api", "http"), defaults("alias", "http"),
		splitter("web",
			consul.ServiceSplit{Weight: 30, Service: "api", RequestHeaders: hdrs(map[string]string{"x-via": "light"})},
			consul.ServiceSplit{Weight: 60, Service: "api", RequestHeaders: hdrs(map[string]string{"x-via": "heavy"})},
			consul.ServiceSplit{Weight: 10, Service: "alias"}),
		splitter("alias", consul.ServiceSplit{Weight: 100, Service: "api", RequestHeaders: hdrs(map[string]string{"x-via": "light"})}),
	)
	c := mustCompile(t, s, "web")
	want := []Split{
		{Weight: 40, TargetID: "api.default.default.dc1", RequestHeaders: hdrs(map[string]string{"x-via": "light"})},
		{Weight: 60, TargetID: "api.default.default.dc1", RequestHeaders: hdrs(map[string]string{"x-via": "heavy"})},
	}
	if got := c.Routes[0].Splits; !reflect.DeepEqual(got, want) {
		t.Errorf("splits:\n got %s\nwant %s", fmtSplits(got), fmtSplits(want))
	}
}

func fmtSplits(splits []Split) string {
	out := ""
	for _, s := range splits {
		out += fmt.Sprintf("{%g %s req=%+v resp=%+v} ", s.Weight, s.TargetID, s.RequestHeaders, s.ResponseHeaders)
	}
	return out
}
